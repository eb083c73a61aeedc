#include "runtime/gpu_visibility.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace plimsoll::runtime {
namespace {

std::string gpus_word(std::size_t count) { return fmt::format("{} GPU{}", count, count == 1 ? "" : "s"); }

std::size_t count_entries(const std::string& list) {
  if (list.empty()) return 0;
  return static_cast<std::size_t>(std::count(list.begin(), list.end(), ',')) + 1;
}

}  // namespace

VisibleGpus select_visible_gpus(const GpuScan& scan, const std::optional<std::string>& plimsoll_visible) {
  VisibleGpus visible;
  visible.cuda_count = scan.gpus.size();
  visible.driver_reason = scan.unavailable_reason;
  visible.plimsoll_visible = plimsoll_visible;

  std::vector<std::string> uuids;
  uuids.reserve(scan.gpus.size());
  for (const GpuInfo& gpu : scan.gpus) uuids.push_back(gpu.uuid);
  visible.plimsoll_visibility = resolve_visibility(plimsoll_visible, uuids);

  std::vector<int> chosen;
  if (visible.plimsoll_visibility.set) {
    chosen = visible.plimsoll_visibility.selected;
  } else {
    for (std::size_t i = 0; i < scan.gpus.size(); ++i) chosen.push_back(static_cast<int>(i));
  }
  for (const int index : chosen) {
    if (index < 0 || static_cast<std::size_t>(index) >= scan.gpus.size()) continue;
    GpuInfo gpu = scan.gpus[static_cast<std::size_t>(index)];
    visible.cuda_ordinals.push_back(gpu.ordinal);
    gpu.ordinal = static_cast<int>(visible.gpus.size());
    visible.gpus.push_back(std::move(gpu));
  }
  return visible;
}

std::string why_gpu_missing(const VisibleGpus& visible, int index, const std::optional<std::string>& cuda_visible) {
  if (!visible.driver_reason.empty()) return visible.driver_reason;
  if (visible.cuda_count == 0) {
    if (cuda_visible) {
      return fmt::format("the CUDA driver shows no GPU (CUDA_VISIBLE_DEVICES=\"{}\" may hide them)", *cuda_visible);
    }
    return "the CUDA driver shows no GPU";
  }
  std::string reason = fmt::format("{} visible", gpus_word(visible.gpus.size()));
  if (visible.plimsoll_visibility.set) {
    reason += fmt::format(" (PLIMSOLL_VISIBLE_DEVICES=\"{}\" selects {} of the {} CUDA shows)",
                          visible.plimsoll_visible.value_or(""), visible.gpus.size(), gpus_word(visible.cuda_count));
  } else if (cuda_visible && index >= 0 && static_cast<std::size_t>(index) >= visible.gpus.size()) {
    // The usual surprise: CUDA_VISIBLE_DEVICES=2 makes the third GPU cuda:0, not cuda:2.
    reason += fmt::format(" (CUDA_VISIBLE_DEVICES=\"{}\" renumbers the GPUs it keeps from cuda:0)", *cuda_visible);
  }
  return reason;
}

std::vector<std::string> explain_visibility(const VisibleGpus& visible,
                                            const std::optional<std::string>& cuda_visible) {
  std::vector<std::string> lines;
  const bool driver_answered = visible.driver_reason.empty();

  if (!cuda_visible) {
    lines.push_back(driver_answered
                        ? fmt::format("CUDA_VISIBLE_DEVICES is not set: CUDA shows every GPU the driver finds ({})",
                                      visible.cuda_count)
                        : "CUDA_VISIBLE_DEVICES is not set");
  } else if (cuda_visible->empty()) {
    lines.push_back("CUDA_VISIBLE_DEVICES=\"\" hides every GPU from CUDA; unset it to see them");
  } else {
    std::string line = fmt::format("CUDA_VISIBLE_DEVICES=\"{}\" (applied by CUDA, not by plimsoll)", *cuda_visible);
    if (driver_answered) {
      line += fmt::format(": CUDA shows {}, numbered from cuda:0 in the order listed", gpus_word(visible.cuda_count));
    }
    lines.push_back(std::move(line));
    const std::size_t entries = count_entries(*cuda_visible);
    if (!driver_answered) {
      // CUDA reports "no device" when the list's first entry names no GPU: the list, not the machine, may be why.
      lines.push_back(
          "CUDA_VISIBLE_DEVICES may be why the driver found no GPU: CUDA stops at the first entry that is not a valid "
          "index or UUID or names no GPU, and shows none at all when an entry repeats a GPU; compare it with "
          "`nvidia-smi -L`, or unset it");
    } else if (entries > visible.cuda_count) {
      lines.push_back(fmt::format(
          "CUDA_VISIBLE_DEVICES lists {} entries but CUDA shows {}: CUDA stops at the first entry that is not a "
          "valid index or UUID or names no GPU, and shows none at all when an entry repeats a GPU; compare it with "
          "`nvidia-smi -L`",
          entries, gpus_word(visible.cuda_count)));
    }
  }

  if (!visible.plimsoll_visibility.set) {
    lines.push_back("PLIMSOLL_VISIBLE_DEVICES is not set: plimsoll uses every GPU CUDA shows");
  } else if (!driver_answered) {
    // Its entries would all read "no GPU N", which blames the list for what the driver did.
    lines.push_back(fmt::format("PLIMSOLL_VISIBLE_DEVICES=\"{}\" has no GPU to select from (see below)",
                                visible.plimsoll_visible.value_or("")));
  } else {
    lines.push_back(fmt::format("PLIMSOLL_VISIBLE_DEVICES=\"{}\": {}", visible.plimsoll_visible.value_or(""),
                                visible.plimsoll_visibility.summary()));
    for (std::size_t i = 0; i < visible.gpus.size(); ++i) {
      lines.push_back(fmt::format("  plimsoll cuda:{} is CUDA's cuda:{} ({}, {})", i, visible.cuda_ordinals[i],
                                  visible.gpus[i].name, visible.gpus[i].uuid));
    }
  }

  if (visible.gpus.empty()) {
    if (!driver_answered) {
      lines.push_back(fmt::format("No GPU: {}", visible.driver_reason));
    } else if (visible.cuda_count == 0) {
      lines.push_back("No GPU: the CUDA driver answered but shows no GPU");
    } else {
      lines.push_back(fmt::format("No GPU: PLIMSOLL_VISIBLE_DEVICES selects none of the {} CUDA shows",
                                  gpus_word(visible.cuda_count)));
    }
  }
  return lines;
}

}  // namespace plimsoll::runtime
