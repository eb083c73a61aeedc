#pragma once
// The rows of `plimsoll devices`: every device the runtime could create, with the limit it would get.
#include <vector>

#include "plimsoll/device.hpp"
#include "plimsoll/policy.hpp"
#include "plimsoll/runtime.hpp"
#include "runtime/gpu_visibility.hpp"

namespace plimsoll::runtime {

/// The host, the visible GPUs, simulated devices named in the config or in `created`, each followed by its
/// logical devices. A device whose config cannot be honoured is still listed: its details say why.
/// `driver_loaded`: whether the runtime holds a CUDA driver to allocate from the GPUs it lists.
std::vector<DeviceListing> list_devices(const Config& config, const VisibleGpus& gpus, const HostInfo& host,
                                        const std::vector<DeviceName>& created, bool driver_loaded);

}  // namespace plimsoll::runtime
