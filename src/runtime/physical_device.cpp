#include "runtime/physical_device.hpp"

#include <fmt/format.h>

#include "backings/cuda_backing.hpp"
#include "backings/granules.hpp"
#include "backings/host_backing.hpp"
#include "backings/pinned_host_backing.hpp"
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

PhysicalDevice describe_pinned_host(const HostInfo& host) {
  PhysicalDevice device = describe_host(host);
  device.name.pinned = true;
  device.hardware = "pinned host memory";
  device.memory.pinned = true;
  device.details = "page-locked with cuMemHostRegister; " + device.details;
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
  device.memory.compute_major = gpu.compute_major;
  device.uuid = gpu.uuid;
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

std::string missing_backing_reason(DeviceKind kind, bool driver_loaded) {
  if (kind == DeviceKind::cuda && !driver_loaded) {
    return "no CUDA driver is loaded to allocate from it (the GPU list was given without one)";
  }
  return {};
}

std::string missing_backing_reason(const DeviceName& name, bool driver_loaded) {
  if (name.kind == DeviceKind::cpu && name.pinned && !driver_loaded) {
    return "no CUDA driver is loaded, and pinned host memory is page-locked through it (cuMemHostRegister); use "
           "cpu, or run where the NVIDIA driver is installed";
  }
  return missing_backing_reason(name.kind, driver_loaded);
}

namespace {

DeviceBacking make_pinned_backing(const PhysicalDevice& device, const cuda_driver::Api& driver) {
  cuda_driver::Device handle = 0;
  if (const cuda_driver::Result result = driver.device_get(&handle, 0); result != cuda_driver::kSuccess) {
    throw DeviceUnavailable(fmt::format("cpu-pinned is not available: the CUDA driver has no GPU to register host "
                                        "memory with (cuDeviceGet(0): {}); use cpu",
                                        driver.error_name(result)));
  }
  return DeviceBacking{std::make_unique<backings::PinnedHostBacking>(driver, handle, device.memory.ceiling_bytes),
                       true, {}};
}


DeviceBacking make_gpu_backing(const PhysicalDevice& device, const cuda_driver::Api& driver) {
  cuda_driver::Device handle = 0;
  if (const cuda_driver::Result result = driver.device_get(&handle, device.driver_ordinal);
      result != cuda_driver::kSuccess) {
    throw DeviceUnavailable(fmt::format("{} is not available: the CUDA driver refused its ordinal {} ({}: {})",
                                        device.name.str(), device.driver_ordinal, "cuDeviceGet",
                                        driver.error_name(result)));
  }
  backings::CudaBackingChoice choice = backings::make_cuda_backing(driver, handle);
  return DeviceBacking{std::move(choice.backing), choice.growable, std::move(choice.fallback_reason)};
}

}  // namespace

DeviceBacking make_backing(const PhysicalDevice& device, const cuda_driver::Api* driver) {
  switch (device.memory.kind) {
    case DeviceKind::cpu:
      if (device.name.pinned) {
        if (driver != nullptr) return make_pinned_backing(device, *driver);
        throw DeviceUnavailable(fmt::format("{} is not available: {}", device.name.str(),
                                            missing_backing_reason(device.name, false)));
      }
      // The runtime's view of the host (possibly injected by tests) bounds the backing, not a second scan.
      return DeviceBacking{
          std::make_unique<backings::HostBacking>(backings::kDefaultGranularity, device.memory.ceiling_bytes), true,
          {}};
    case DeviceKind::sim:
      return DeviceBacking{std::make_unique<backings::SimBacking>(device.memory.total_bytes), true, {}};
    case DeviceKind::cuda:
      if (driver != nullptr) return make_gpu_backing(device, *driver);
      break;
  }
  throw DeviceUnavailable(fmt::format("{} is not available: {}", device.name.str(),
                                      missing_backing_reason(device.memory.kind, driver != nullptr)));
}

}  // namespace plimsoll::runtime
