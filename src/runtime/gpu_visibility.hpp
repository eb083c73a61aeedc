#pragma once
// Which GPUs plimsoll uses, and the words that explain it.
//
// CUDA has already applied CUDA_VISIBLE_DEVICES when it lists GPUs, so plimsoll never applies it again: it
// only explains it. PLIMSOLL_VISIBLE_DEVICES then selects among CUDA's GPUs with the same grammar, and the
// selected ones are renumbered cuda:0, cuda:1, ... in the order listed (TensorFlow's visible_device_list).
#include <optional>
#include <string>
#include <vector>

#include "plimsoll/device.hpp"

namespace plimsoll::runtime {

struct VisibleGpus {
  std::vector<GpuInfo> gpus;         // ordinal renumbered: gpus[i].ordinal == i, plimsoll's cuda:i
  std::vector<int> cuda_ordinals;    // gpus[i] is CUDA's cuda:cuda_ordinals[i]
  std::size_t cuda_count = 0;        // GPUs CUDA shows
  std::string driver_reason;         // why the driver gave no GPU, if it did not answer
  std::optional<std::string> plimsoll_visible;  // PLIMSOLL_VISIBLE_DEVICES as configured
  Visibility plimsoll_visibility;
};

VisibleGpus select_visible_gpus(const GpuScan& scan, const std::optional<std::string>& plimsoll_visible);

/// Why cuda:`index` cannot be had, in a clause ("2 GPUs visible"); `cuda_visible` is CUDA_VISIBLE_DEVICES.
std::string why_gpu_missing(const VisibleGpus& visible, int index, const std::optional<std::string>& cuda_visible);

/// Lines for `plimsoll devices`: CUDA_VISIBLE_DEVICES, then PLIMSOLL_VISIBLE_DEVICES, then the driver.
std::vector<std::string> explain_visibility(const VisibleGpus& visible, const std::optional<std::string>& cuda_visible);

}  // namespace plimsoll::runtime
