#include "plan/size_fit.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

namespace plimsoll::plan {
namespace {

// A linear fit is clean when every recorded size is within this of the line: sizes are padded a little
// (alignment), so exact equality would call rounding a non-fit.
constexpr double kRelativeTolerance = 0.005;
constexpr double kByteTolerance = 64;

// Saturates far above any device (2^62 bytes) instead of overflowing: StepModel::rebuild refuses such a step.
std::uint64_t non_negative(double bytes) {
  constexpr double kCeiling = 4611686018427387904.0;  // 2^62
  if (!(bytes > 0)) return 0;
  return bytes >= kCeiling ? std::uint64_t{1} << 62 : static_cast<std::uint64_t>(std::llround(bytes));
}

}  // namespace

std::uint64_t FittedSize::bytes_at(std::uint64_t batch) const {
  const double b = static_cast<double>(batch);
  switch (kind) {
    case SizeFit::constant:
    case SizeFit::unmatched:
      return points.front().second;
    case SizeFit::linear:
      return non_negative(intercept + slope * b);
    case SizeFit::none:
      break;
  }
  // Piecewise linear through the recorded sizes, the end segments extended.
  std::size_t upper = 1;
  while (upper + 1 < points.size() && points[upper].first < batch) ++upper;
  const auto [b0, s0] = points[upper - 1];
  const auto [b1, s1] = points[upper];
  const double slope_here = (static_cast<double>(s1) - static_cast<double>(s0)) /
                            (static_cast<double>(b1) - static_cast<double>(b0));
  return non_negative(static_cast<double>(s0) + slope_here * (b - static_cast<double>(b0)));
}

FittedSize fit_size(std::vector<std::pair<std::uint64_t, std::uint64_t>> points) {
  FittedSize fit;
  const std::uint64_t own = points.front().second;
  std::sort(points.begin(), points.end());
  fit.points = std::move(points);
  if (fit.points.size() < 2) {
    fit.kind = SizeFit::unmatched;
    fit.points = {{fit.points.front().first, own}};
    return fit;
  }
  const bool all_equal = std::all_of(fit.points.begin(), fit.points.end(),
                                     [&](const auto& point) { return point.second == fit.points.front().second; });
  if (all_equal) {
    fit.kind = SizeFit::constant;
    return fit;
  }
  // Least squares over the points.
  const double n = static_cast<double>(fit.points.size());
  double sum_b = 0, sum_s = 0, sum_bb = 0, sum_bs = 0;
  for (const auto& [batch, bytes] : fit.points) {
    const double b = static_cast<double>(batch);
    const double s = static_cast<double>(bytes);
    sum_b += b;
    sum_s += s;
    sum_bb += b * b;
    sum_bs += b * s;
  }
  const double denominator = n * sum_bb - sum_b * sum_b;
  fit.slope = (n * sum_bs - sum_b * sum_s) / denominator;
  fit.intercept = (sum_s - fit.slope * sum_b) / n;
  bool clean = fit.slope >= 0 && fit.intercept + fit.slope >= 0;  // no negative size at batch 1
  for (const auto& [batch, bytes] : fit.points) {
    const double s = static_cast<double>(bytes);
    const double error = std::abs(fit.intercept + fit.slope * static_cast<double>(batch) - s);
    clean = clean && error <= std::max(kByteTolerance, kRelativeTolerance * s);
  }
  fit.kind = clean ? SizeFit::linear : SizeFit::none;
  return fit;
}

}  // namespace plimsoll::plan
