// predict and largest_batch (plimsoll/plan.hpp): the rebuilt step replayed under each allocator.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "plan/plan_replay.hpp"
#include "plimsoll/device.hpp"
#include "plimsoll/error.hpp"
#include "plimsoll/plan.hpp"
#include "plimsoll/size.hpp"

namespace plimsoll {
namespace {

// Beyond this factor outside the recorded batch sizes the output calls the prediction far extrapolated.
constexpr double kFarFactor = 2.0;
// Batches probed above a found boundary, up to 4x it, for allocators whose reserved bytes are not monotone.
constexpr std::uint64_t kProbesBeyond = 12;

// "1.5", "4", "4440": a ratio as a reader says it.
std::string times(double factor) {
  return factor < 100 ? fmt::format("{:.3g}", factor) : fmt::format("{:.0f}", factor);
}

std::string extrapolation_note(const std::vector<std::uint64_t>& batches, std::uint64_t batch) {
  const std::uint64_t smallest = batches.front();
  const std::uint64_t largest = batches.back();
  if (batch > largest) {
    const double factor = static_cast<double>(batch) / static_cast<double>(largest);
    return fmt::format("batch {} is {}x the largest recorded batch ({}): extrapolated{}", batch, times(factor), largest,
                       factor > kFarFactor ? " far beyond the recordings; record a run nearer this size to confirm"
                                           : "");
  }
  if (batch < smallest) {
    const double factor = static_cast<double>(smallest) / static_cast<double>(batch);
    return fmt::format("batch {} is 1/{} of the smallest recorded batch ({}): extrapolated{}", batch, times(factor),
                       smallest,
                       factor > kFarFactor ? " far below the recordings; record a run nearer this size to confirm" : "");
  }
  return "";
}

AllocatorPrediction predict_one(const Trace& step, PlanAllocator allocator, std::uint64_t device_bytes) {
  AllocatorPrediction unlimited = plan::replay_under(step, allocator, std::nullopt);
  if (unlimited.peak_reserved_bytes <= device_bytes) return unlimited;
  // It takes more than the device unconstrained; under the limit an allocator may still fit by releasing its
  // cache and retrying (all three do), so the verdict comes from a run on the device itself.
  // Where it does, its peaks are the ones on the device; where it does not, the unconstrained ones say how much it
  // would have needed.
  AllocatorPrediction limited = plan::replay_under(step, allocator, device_bytes);
  if (limited.fits) return limited;
  unlimited.fits = false;
  unlimited.oom_report = std::move(limited.oom_report);
  unlimited.peak_fill = std::move(limited.peak_fill);
  return unlimited;
}

}  // namespace

std::string_view to_string(SizeFit fit) {
  switch (fit) {
    case SizeFit::constant: return "constant";
    case SizeFit::linear: return "linear";
    case SizeFit::none: return "neither";
    case SizeFit::unmatched: return "unmatched";
  }
  return "?";
}

std::string_view to_string(PlanAllocator allocator) {
  switch (allocator) {
    case PlanAllocator::plimsoll: return "plimsoll";
    case PlanAllocator::pytorch: return "pytorch";
    case PlanAllocator::tensorflow: return "tensorflow";
  }
  return "?";
}

PlanAllocator parse_plan_allocator(std::string_view text) {
  for (PlanAllocator allocator : {PlanAllocator::plimsoll, PlanAllocator::pytorch, PlanAllocator::tensorflow}) {
    if (text == to_string(allocator)) return allocator;
  }
  throw InvalidArgument(fmt::format("unknown allocator '{}': give plimsoll, pytorch or tensorflow (comma-separated "
                                    "for several)",
                                    text));
}

std::uint64_t plan_device_bytes(std::string_view device) {
  if (device.starts_with("cuda")) {
    const DeviceName name = DeviceName::parse(device);
    const GpuScan scan = scan_gpus();
    if (!scan.unavailable_reason.empty()) {
      throw InvalidArgument(fmt::format("--device {}: no GPU to read the size of ({}); give the GPU's memory "
                                        "instead, e.g. --device sim:16GiB or --device 80GiB",
                                        device, scan.unavailable_reason));
    }
    for (const GpuInfo& gpu : scan.gpus) {
      if (gpu.ordinal == name.index) return gpu.total_bytes;
    }
    throw InvalidArgument(fmt::format("--device {}: CUDA shows {} GPU(s); name one of cuda:0..cuda:{}, or give a "
                                      "size such as sim:16GiB",
                                      device, scan.gpus.size(), scan.gpus.empty() ? 0 : scan.gpus.size() - 1));
  }
  if (device.starts_with("sim:")) return DeviceName::parse(device).sim_bytes;
  try {
    const std::uint64_t bytes = parse_size(device);
    if (bytes == 0) throw InvalidArgument("0 bytes");
    return bytes;
  } catch (const InvalidArgument&) {
    throw InvalidArgument(fmt::format("--device {}: expected sim:SIZE (e.g. sim:16GiB), a size (16GiB) or cuda:N",
                                      device));
  }
}

Prediction predict(const StepModel& model, std::uint64_t batch, std::uint64_t device_bytes,
                   const std::vector<PlanAllocator>& allocators) {
  const std::uint64_t fixed = model.fixed_bytes();
  if (device_bytes < fixed) {
    throw InvalidArgument(fmt::format(
        "the device ({}) is smaller than what {} holds before its first step whatever the batch size ({}: "
        "weights and the like): no batch size fits; plan for a larger device, or record a smaller model",
        format_size(device_bytes), model.job(), format_size(fixed)));
  }
  const Trace step = model.rebuild(batch);
  Prediction prediction{.batch = batch, .device_bytes = device_bytes,
                        .extrapolation = extrapolation_note(model.batches(), batch)};
  for (const PlanAllocator allocator : allocators) prediction.allocators.push_back(predict_one(step, allocator, device_bytes));
  return prediction;
}

std::vector<LargestBatch> largest_batch(const StepModel& model, std::uint64_t device_bytes, double margin,
                                        const std::vector<PlanAllocator>& allocators, std::uint64_t max_batch) {
  if (!(margin >= 0 && margin < 1)) {
    throw InvalidArgument(fmt::format("margin {} is not a share of the device in [0, 1); e.g. 0.05 keeps 5% free",
                                      margin));
  }
  if (model.batches().size() < 2) {
    const std::uint64_t only = model.batches().front();
    throw InvalidArgument(fmt::format(
        "--fit needs recordings at two or more batch sizes, and there is one (batch {}): record the job at another "
        "batch size too, e.g. `plimsoll train --record b{}.plimsoll --batch-size {}`",
        only, std::max<std::uint64_t>(1, only / 2), std::max<std::uint64_t>(1, only / 2)));
  }
  const auto usable = static_cast<std::uint64_t>(static_cast<double>(device_bytes) * (1 - margin));
  std::vector<LargestBatch> results;
  for (const PlanAllocator allocator : allocators) {
    const auto at = [&](std::uint64_t batch) {
      return predict(model, batch, usable, {allocator}).allocators.front();
    };
    LargestBatch result{.allocator = allocator};
    std::uint64_t fits = 0;  // the largest batch seen to fit
    std::uint64_t fails = 1;  // a batch above it seen not to
    std::optional<AllocatorPrediction> fitting;
    AllocatorPrediction failing;
    bool failing_known = false;
    for (;;) {
      // Doubling until a batch does not fit, then bisection between the last that did and the first that did not.
      for (;;) {
        AllocatorPrediction probe = at(fails);
        if (!probe.fits) {
          failing = std::move(probe);
          failing_known = true;
          break;
        }
        fits = fails;
        fitting = std::move(probe);
        if (fails >= max_batch) break;
        fails = std::min(max_batch, fails * 2);
      }
      if (fits == fails) break;  // max_batch fits
      while (fails - fits > 1) {
        const std::uint64_t middle = fits + (fails - fits) / 2;
        AllocatorPrediction probe = at(middle);
        if (probe.fits) {
          fits = middle;
          fitting = std::move(probe);
        } else {
          fails = middle;
          failing = std::move(probe);
        }
      }
      // Caching allocators round to segments, so a larger batch can need less than a smaller one: look above the
      // boundary before believing it, and go on from the largest batch found to fit there.
      std::optional<std::uint64_t> beyond;
      for (std::uint64_t i = kProbesBeyond; i >= 1 && !beyond; --i) {
        const std::uint64_t batch = std::min(max_batch, fails + (3 * fails * i) / kProbesBeyond);
        if (batch <= fails) continue;
        AllocatorPrediction probe = at(batch);
        if (probe.fits) {
          beyond = batch;
          fitting = std::move(probe);
        }
      }
      if (!beyond) break;
      if (!result.smaller_batch_that_does_not_fit) result.smaller_batch_that_does_not_fit = fails;
      fits = *beyond;
      if (fits >= max_batch) {
        fails = fits;
        break;
      }
      fails = std::min(max_batch, fits * 2);
    }
    result.largest_batch = fits;
    result.at_largest = fitting;
    if (failing_known && fails > fits) result.first_too_large = std::move(failing);
    if (fitting) result.headroom_bytes = device_bytes - std::min(device_bytes, fitting->peak_live_bytes);
    results.push_back(std::move(result));
  }
  return results;
}

}  // namespace plimsoll
