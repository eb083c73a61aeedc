#include "runtime/physical_device.hpp"

#include <fmt/format.h>

#include "backings/granules.hpp"
#include "backings/host_backing.hpp"
#include "backings/sim_backing.hpp"
#include "plimsoll/error.hpp"
#include "plimsoll/size.hpp"

namespace plimsoll::runtime {

PhysicalDevice describe_host(const HostInfo& host) {
  PhysicalDevice device;
  device.name = DeviceName{};
  device.hardware = "host";
  device.memory.kind = DeviceKind::cpu;
  device.memory.total_bytes = host.total_ram_bytes;
  device.memory.free_bytes = host.available_ram_bytes;
  device.memory.ceiling_bytes = host.limit_bytes();
  device.details = host.cgroup_limit_bytes
                       ? fmt::format("cgroup memory limit {}", format_size(*host.cgroup_limit_bytes))
                       : std::string("no cgroup memory limit");
  return device;
}

PhysicalDevice describe_gpu(const GpuInfo& gpu) {
  PhysicalDevice device;
  device.name.kind = DeviceKind::cuda;
  device.name.index = gpu.ordinal;
  device.hardware = gpu.name;
  device.memory.kind = DeviceKind::cuda;
  device.memory.total_bytes = gpu.total_bytes;
  device.memory.free_bytes = gpu.free_bytes;
  device.memory.ceiling_bytes = gpu.total_bytes;
  device.details = fmt::format("{}, PCI {}, compute {}.{}", gpu.uuid, gpu.pci_bus_id, gpu.compute_major,
                               gpu.compute_minor);
  return device;
}

PhysicalDevice describe_sim(std::uint64_t bytes) {
  PhysicalDevice device;
  device.name.kind = DeviceKind::sim;
  device.name.sim_bytes = bytes;
  device.hardware = "simulated device";
  device.memory.kind = DeviceKind::sim;
  device.memory.total_bytes = bytes;
  device.memory.free_bytes = bytes;
  device.memory.ceiling_bytes = bytes;
  device.details = "synthetic addresses, no memory touched";
  return device;
}

std::string missing_backing_reason(DeviceKind kind) {
  if (kind == DeviceKind::cuda) {
    return "CUDA backings are not built in this version of plimsoll (GPUs can be listed, not allocated from yet)";
  }
  return {};
}

std::unique_ptr<backings::Backing> make_backing(const PhysicalDevice& device) {
  switch (device.memory.kind) {
    case DeviceKind::cpu:
      // The runtime's view of the host (possibly injected by tests) bounds the backing, not a second scan.
      return std::make_unique<backings::HostBacking>(backings::kDefaultGranularity, device.memory.ceiling_bytes);
    case DeviceKind::sim:
      return std::make_unique<backings::SimBacking>(device.memory.total_bytes);
    case DeviceKind::cuda:
      break;
  }
  throw DeviceUnavailable(fmt::format("{} is not available: {}", device.name.str(),
                                      missing_backing_reason(device.memory.kind)));
}

}  // namespace plimsoll::runtime
