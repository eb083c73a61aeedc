#include "plan/plan_report.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "plimsoll/size.hpp"

namespace plimsoll::plan {
namespace {

std::string fill_text(const std::vector<PeakShare>& fill) {
  std::vector<std::string> parts;
  for (const PeakShare& share : fill) parts.push_back(fmt::format("{} {}", share.name, format_size(share.bytes)));
  return fmt::format("{}", fmt::join(parts, ", "));
}

std::string header(const StepModel& model) {
  return fmt::format("{}: {} steps recorded at batch {}\n", model.job(), model.steps(),
                     fmt::join(model.batches(), ", "));
}

std::string table(const std::vector<AllocatorPrediction>& rows, const std::vector<std::uint64_t>* batches) {
  std::string text = fmt::format("{:<11}{}{:>14}{:>16}  {:<5} {}\n", "allocator", batches ? "       batch" : "",
                                 "peak live", "peak reserved", "fits", "peak filled by");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const AllocatorPrediction& row = rows[i];
    text += fmt::format("{:<11}{}{:>14}{:>16}  {:<5} {}\n", to_string(row.allocator),
                        batches ? fmt::format("{:>12}", (*batches)[i]) : std::string(),
                        format_size(row.peak_live_bytes), format_size(row.peak_reserved_bytes),
                        row.fits ? "yes" : "no", fill_text(row.peak_fill));
  }
  return text;
}

nlohmann::ordered_json recorded_json(const StepModel& model) {
  const FitSummary summary = model.fit_summary();
  nlohmann::ordered_json fits;
  for (const SizeFit kind : {SizeFit::constant, SizeFit::linear, SizeFit::none, SizeFit::unmatched}) {
    fits[std::string(to_string(kind))] = summary.counts[static_cast<std::size_t>(kind)];
  }
  nlohmann::ordered_json unclean = nlohmann::ordered_json::array();
  for (const UncleanAllocation& allocation : summary.largest_unclean) {
    nlohmann::ordered_json sizes = nlohmann::ordered_json::array();
    for (const auto& [batch, bytes] : allocation.sizes) sizes.push_back({{"batch", batch}, {"bytes", bytes}});
    unclean.push_back({{"fit", to_string(allocation.fit)}, {"where", allocation.where}, {"sizes", sizes}});
  }
  return {{"job", model.job()},
          {"recorded_batches", model.batches()},
          {"steps", model.steps()},
          {"fixed_bytes", model.fixed_bytes()},
          {"allocation_fits", fits},
          {"unclean_allocations", unclean}};
}

nlohmann::ordered_json prediction_entry(const AllocatorPrediction& prediction) {
  nlohmann::ordered_json fill = nlohmann::ordered_json::array();
  for (const PeakShare& share : prediction.peak_fill) fill.push_back({{"name", share.name}, {"bytes", share.bytes}});
  nlohmann::ordered_json entry;
  entry["allocator"] = to_string(prediction.allocator);
  entry["peak_live_bytes"] = prediction.peak_live_bytes;
  entry["peak_reserved_bytes"] = prediction.peak_reserved_bytes;
  entry["fits"] = prediction.fits;
  entry["peak_fill"] = fill;
  if (!prediction.fits) entry["oom_report"] = prediction.oom_report;
  return entry;
}

}  // namespace

std::string fit_text(const StepModel& model) {
  const FitSummary summary = model.fit_summary();
  const auto count = [&](SizeFit kind) { return summary.counts[static_cast<std::size_t>(kind)]; };
  const auto at_peak = [&](SizeFit kind) { return format_size(summary.peak_share_bytes[static_cast<std::size_t>(kind)]); };
  if (model.batches().size() == 1) {
    return fmt::format("one recording: its own batch size only ({} allocations replayed as recorded)\n",
                       summary.allocations);
  }
  std::string text = fmt::format(
      "sizes, over the {} allocations of the batch-{} recording: {} constant ({} at its peak), {} linear in the batch "
      "size ({}), {} neither ({}), {} with no counterpart in another recording ({})\n",
      summary.allocations, summary.batch, count(SizeFit::constant), at_peak(SizeFit::constant),
      count(SizeFit::linear), at_peak(SizeFit::linear), count(SizeFit::none), at_peak(SizeFit::none),
      count(SizeFit::unmatched), at_peak(SizeFit::unmatched));
  if (!summary.largest_unclean.empty()) {
    text += "no clean fit (the largest; \"neither\" are predicted between and beyond their recorded sizes, "
            "\"unmatched\" kept as recorded):\n";
    for (const UncleanAllocation& allocation : summary.largest_unclean) {
      std::vector<std::string> sizes;
      for (const auto& [batch, bytes] : allocation.sizes) sizes.push_back(fmt::format("{} at {}", format_size(bytes), batch));
      text += fmt::format("  {:<9} {} ({})\n", to_string(allocation.fit), allocation.where, fmt::join(sizes, ", "));
    }
  }
  return text;
}

std::string prediction_text(const StepModel& model, const Prediction& prediction) {
  std::string text = header(model);
  text += fmt::format("batch {} on a {} device{}\n\n", prediction.batch, format_size(prediction.device_bytes),
                      prediction.extrapolation.empty() ? "" : fmt::format(" ({})", prediction.extrapolation));
  text += table(prediction.allocators, nullptr);
  text += "\n";
  text += fit_text(model);
  for (const AllocatorPrediction& allocator : prediction.allocators) {
    if (!allocator.fits) {
      text += fmt::format("\n{} runs out of memory at batch {}:\n{}\n", to_string(allocator.allocator),
                          prediction.batch, allocator.oom_report);
    }
  }
  return text;
}

std::string largest_batch_text(const StepModel& model, std::uint64_t device_bytes, double margin,
                               const std::vector<LargestBatch>& results) {
  std::string text = header(model);
  text += fmt::format("largest batch on a {} device, keeping {:.3g}% of it free (a search over whole batch sizes):\n\n",
                      format_size(device_bytes), 100 * margin);
  std::vector<AllocatorPrediction> rows;
  std::vector<std::uint64_t> batches;
  for (const LargestBatch& result : results) {
    if (!result.at_largest) continue;
    rows.push_back(*result.at_largest);
    batches.push_back(result.largest_batch);
  }
  text += table(rows, &batches);
  text += "\n";
  for (const LargestBatch& result : results) {
    if (result.largest_batch == 0) {
      text += fmt::format("{}: not even batch 1 fits\n", to_string(result.allocator));
    } else {
      text += fmt::format("{}: batch {} fits, its peak live {} under the device", to_string(result.allocator),
                          result.largest_batch, format_size(result.headroom_bytes));
      text += result.first_too_large.oom_report.empty()
                  ? " (the search's upper end)\n"
                  : fmt::format("; batch {} does not (it would reserve {})\n", result.largest_batch + 1,
                                format_size(result.first_too_large.peak_reserved_bytes));
      if (result.smaller_batch_that_does_not_fit) {
        text += fmt::format("  (batch {}, smaller, does not fit: this allocator's memory does not grow steadily with "
                            "the batch size)\n",
                            *result.smaller_batch_that_does_not_fit);
      }
    }
  }
  const std::uint64_t largest = model.batches().back();
  for (const LargestBatch& result : results) {
    if (result.largest_batch > 2 * largest) {
      text += fmt::format("(batch {} is {:.1f}x the largest recorded batch, {}: extrapolated far beyond the "
                          "recordings; record a run nearer it to confirm)\n",
                          result.largest_batch, static_cast<double>(result.largest_batch) / static_cast<double>(largest),
                          largest);
      break;
    }
  }
  text += "\n";
  text += fit_text(model);
  for (const LargestBatch& result : results) {
    if (result.first_too_large.oom_report.empty()) continue;
    text += fmt::format("\n{} at batch {}, the first that does not fit:\n{}\n", to_string(result.allocator),
                        result.largest_batch + 1, result.first_too_large.oom_report);
  }
  return text;
}

nlohmann::ordered_json prediction_json(const StepModel& model, const Prediction& prediction) {
  nlohmann::ordered_json out;
  out["batch"] = prediction.batch;
  out["device_bytes"] = prediction.device_bytes;
  nlohmann::ordered_json entries = nlohmann::ordered_json::array();
  for (const AllocatorPrediction& allocator : prediction.allocators) entries.push_back(prediction_entry(allocator));
  out["predictions"] = entries;
  out["extrapolation"] = prediction.extrapolation;
  out["model"] = recorded_json(model);
  return out;
}

nlohmann::ordered_json largest_batch_json(const StepModel& model, std::uint64_t device_bytes, double margin,
                                          const std::vector<LargestBatch>& results) {
  nlohmann::ordered_json out;
  std::uint64_t everywhere = results.empty() ? 0 : results.front().largest_batch;
  for (const LargestBatch& result : results) everywhere = std::min(everywhere, result.largest_batch);
  out["batch"] = everywhere;  // the largest batch that fits under every allocator asked
  out["device_bytes"] = device_bytes;
  out["margin"] = margin;
  nlohmann::ordered_json entries = nlohmann::ordered_json::array();
  for (const LargestBatch& result : results) {
    nlohmann::ordered_json entry =
        result.at_largest ? prediction_entry(*result.at_largest)
                          : nlohmann::ordered_json{{"allocator", to_string(result.allocator)},
                                                   {"peak_live_bytes", 0},
                                                   {"peak_reserved_bytes", 0},
                                                   {"fits", false}};
    entry["largest_batch"] = result.largest_batch;
    entry["headroom_bytes"] = result.headroom_bytes;
    if (!result.first_too_large.oom_report.empty()) {
      entry["first_too_large"] = {{"batch", result.largest_batch + 1},
                                  {"peak_live_bytes", result.first_too_large.peak_live_bytes},
                                  {"peak_reserved_bytes", result.first_too_large.peak_reserved_bytes},
                                  {"oom_report", result.first_too_large.oom_report}};
    }
    if (result.smaller_batch_that_does_not_fit) {
      entry["smaller_batch_that_does_not_fit"] = *result.smaller_batch_that_does_not_fit;
    }
    entries.push_back(entry);
  }
  out["predictions"] = entries;
  out["model"] = recorded_json(model);
  return out;
}

}  // namespace plimsoll::plan
