#include "plan/plan_chart.hpp"

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "plimsoll/size.hpp"
#include "telemetry/render/timeline_axis.hpp"
#include "telemetry/render/timeline_svg.hpp"

namespace plimsoll::plan {
namespace {

constexpr double kWidth = 900;
constexpr double kHeight = 440;
constexpr double kLeft = 90;
constexpr double kRight = 30;
constexpr double kTop = 30;
constexpr double kBottom = 50;
constexpr const char* kColours[] = {"#1f77b4", "#ff7f0e", "#2ca02c"};

}  // namespace

std::string plan_chart_html(const StepModel& model, std::uint64_t device_bytes,
                            const std::vector<PlanAllocator>& allocators, std::uint64_t up_to_batch,
                            std::size_t points) {
  up_to_batch = std::max<std::uint64_t>(up_to_batch, 2);
  std::set<std::uint64_t> batches;
  if (model.batches().size() > 1) {
    for (std::size_t i = 0; i < points; ++i) {
      batches.insert(std::max<std::uint64_t>(1, up_to_batch * (i + 1) / points));
    }
    for (const std::uint64_t recorded : model.batches()) {
      if (recorded <= up_to_batch) batches.insert(recorded);
    }
  } else {
    batches.insert(model.batches().front());
  }
  std::vector<Prediction> predictions;
  std::uint64_t top = device_bytes;
  for (const std::uint64_t batch : batches) {
    predictions.push_back(predict(model, batch, device_bytes, allocators));
    for (const AllocatorPrediction& allocator : predictions.back().allocators) {
      top = std::max({top, allocator.peak_reserved_bytes, allocator.peak_live_bytes});
    }
  }
  const double y_top = static_cast<double>(top) * 1.08;
  const double x_right = static_cast<double>(std::max(up_to_batch, *batches.rbegin()));
  const auto x = [&](std::uint64_t batch) {
    return kLeft + (kWidth - kLeft - kRight) * static_cast<double>(batch) / x_right;
  };
  const auto y = [&](std::uint64_t bytes) {
    return kHeight - kBottom - (kHeight - kTop - kBottom) * static_cast<double>(bytes) / y_top;
  };

  std::string svg = fmt::format(R"(<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" font-family="sans-serif" font-size="12">)",
                                kWidth, kHeight);
  svg += fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#888"/>)", kLeft, kTop,
                     kWidth - kLeft - kRight, kHeight - kTop - kBottom);
  // Round ticks from the timelines' axis code: bytes in IEC units, batch sizes as counts.
  for (const telemetry::AxisTick& tick : telemetry::axis_ticks(telemetry::AxisKind::bytes, 0, y_top)) {
    if (tick.value > y_top) continue;
    svg += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" text-anchor="end">{}</text>)", kLeft - 6,
                       y(static_cast<std::uint64_t>(tick.value)) + 4, telemetry::xml_escape(tick.label));
  }
  for (const telemetry::AxisTick& tick : telemetry::axis_ticks(telemetry::AxisKind::events, 0, x_right)) {
    if (tick.value > x_right) continue;
    svg += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" text-anchor="middle">{}</text>)",
                       x(static_cast<std::uint64_t>(tick.value)), kHeight - kBottom + 18,
                       telemetry::xml_escape(tick.label));
  }
  svg += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" text-anchor="middle">batch size</text>)",
                     (kLeft + kWidth - kRight) / 2, kHeight - 12);
  svg += fmt::format(R"(<line x1="{:.1f}" x2="{:.1f}" y1="{:.1f}" y2="{:.1f}" stroke="#d62728" stroke-width="2" stroke-dasharray="8 4"/>)",
                     kLeft, kWidth - kRight, y(device_bytes), y(device_bytes));
  svg += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" fill="#d62728">device {}</text>)", kLeft + 6, y(device_bytes) - 6,
                     telemetry::xml_escape(format_size(device_bytes)));
  for (const std::uint64_t recorded : model.batches()) {
    if (recorded > up_to_batch) continue;
    svg += fmt::format(R"(<line x1="{0:.1f}" x2="{0:.1f}" y1="{1:.1f}" y2="{2:.1f}" stroke="#bbb" stroke-dasharray="2 3"/>)",
                       x(recorded), kTop, kHeight - kBottom);
  }
  for (std::size_t a = 0; a < allocators.size(); ++a) {
    const char* colour = kColours[a % std::size(kColours)];
    std::string reserved;
    std::string live;
    for (const Prediction& prediction : predictions) {
      const AllocatorPrediction& at = prediction.allocators[a];
      reserved += fmt::format("{:.1f},{:.1f} ", x(prediction.batch), y(at.peak_reserved_bytes));
      live += fmt::format("{:.1f},{:.1f} ", x(prediction.batch), y(at.peak_live_bytes));
    }
    svg += fmt::format(R"(<polyline points="{}" fill="none" stroke="{}" stroke-width="2"/>)", reserved, colour);
    if (a == 0) svg += fmt::format(R"(<polyline points="{}" fill="none" stroke="#555" stroke-dasharray="4 3"/>)", live);
    svg += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" fill="{}">{} (peak reserved)</text>)", kLeft + 10,
                       kTop + 16 + 16 * static_cast<double>(a), colour, to_string(allocators[a]));
  }
  svg += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" fill="#555">peak live (dashed); grey lines: recorded batch sizes</text>)",
                     kLeft + 10, kTop + 16 + 16 * static_cast<double>(allocators.size()));
  svg += "</svg>";

  std::string rows;
  for (const Prediction& prediction : predictions) {
    rows += fmt::format("<tr><td>{}</td><td>{}</td>", prediction.batch,
                        telemetry::xml_escape(format_size(prediction.allocators.front().peak_live_bytes)));
    for (const AllocatorPrediction& at : prediction.allocators) {
      rows += fmt::format("<td>{}{}</td>", telemetry::xml_escape(format_size(at.peak_reserved_bytes)), at.fits ? "" : " (no fit)");
    }
    rows += "</tr>\n";
  }
  std::string headers;
  for (const PlanAllocator allocator : allocators) headers += fmt::format("<th>{} reserved</th>", to_string(allocator));
  std::vector<std::string> recorded;
  for (const std::uint64_t batch : model.batches()) recorded.push_back(std::to_string(batch));
  return fmt::format(R"(<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>plimsoll plan: {0}</title>
<style>body{{font-family:sans-serif;margin:24px}} table{{border-collapse:collapse}} td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}</style>
</head><body>
<h1>plimsoll plan: {0}</h1>
<p>Predicted peak memory of a training step against the batch size, from recordings at batch {1}, on a {2} device.</p>
{3}
<table><tr><th>batch</th><th>peak live</th>{4}</tr>
{5}</table>
</body></html>
)",
                     telemetry::xml_escape(model.job()), fmt::join(recorded, ", "), telemetry::xml_escape(format_size(device_bytes)), svg, headers,
                     rows);
}

}  // namespace plimsoll::plan
