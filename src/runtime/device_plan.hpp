#pragma once
// What a device would be created with, worked out without creating it: shared by Runtime::device (which then
// creates it) and Runtime::list_devices (which only shows it).
#include <optional>
#include <string>
#include <vector>

#include "plimsoll/allocator.hpp"
#include "plimsoll/device.hpp"
#include "plimsoll/policy.hpp"
#include "runtime/budget.hpp"
#include "runtime/gpu_visibility.hpp"
#include "runtime/physical_device.hpp"

namespace plimsoll::runtime {

/// The hardware as the runtime sees it (scanned once, or injected by tests).
struct Hardware {
  GpuScan scan;
  HostInfo host;
};

/// The visible GPU `gpus.gpus[index]`, with the driver's ordinal it has in this process (PLIMSOLL_SHARE's cuda:N).
PhysicalDevice describe_visible_gpu(const VisibleGpus& gpus, std::size_t index);

/// The physical device `physical` names, or nullopt for a cuda:N that is not visible. Physical only.
std::optional<PhysicalDevice> find_physical(const VisibleGpus& gpus, const HostInfo& host, const DeviceName& physical);

/// The logical split configured for a physical device, or nullptr. Throws InvalidArgument for a config key
/// that is not a physical device name.
const std::vector<LogicalDeviceConfig>* find_logical_split(const Config& config, const DeviceName& physical);

struct DevicePlan {
  DeviceDescription description;
  bool logical = false;  // draws on a backing shared with its sibling logical devices
};

/// The description `name` gets on `physical`. Throws InvalidArgument for a policy or split the device cannot
/// honour, or for the physical device when it is split; DeviceUnavailable for a logical index not configured.
DevicePlan plan_device(const Config& config, const PhysicalDevice& physical, const DeviceName& name);

}  // namespace plimsoll::runtime
