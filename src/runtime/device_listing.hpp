#pragma once
// The rows of `plimsoll devices`: every device the runtime could create, with the limit it would get.
#include <functional>
#include <vector>

#include "plimsoll/device.hpp"
#include "plimsoll/policy.hpp"
#include "plimsoll/runtime.hpp"
#include "runtime/gpu_visibility.hpp"
#include "runtime/physical_device.hpp"

namespace plimsoll::runtime {

/// The host, the visible GPUs, simulated devices named in the config or in `created`, each followed by its
/// logical devices. A device whose config cannot be honoured is still listed: its details say why.
/// `driver_loaded`: whether the runtime holds a CUDA driver to allocate from the GPUs it lists. `as_planned`: a GPU
/// as the runtime would plan its devices (under PLIMSOLL_SHARE, the share's view of it); an Error it throws is
/// listed as the reason the GPU's devices cannot be created.
using GpuView = std::function<PhysicalDevice(const PhysicalDevice&)>;
std::vector<DeviceListing> list_devices(const Config& config, const VisibleGpus& gpus, const HostInfo& host,
                                        const std::vector<DeviceName>& created, bool driver_loaded,
                                        const GpuView& as_planned);

}  // namespace plimsoll::runtime
