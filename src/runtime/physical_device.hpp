#pragma once
// A physical device as the runtime sees it: what it is, what memory it has, and where its memory comes from.
#include <memory>
#include <string>

#include "backings/backing.hpp"
#include "devices/cuda_driver.hpp"
#include "plimsoll/device.hpp"
#include "runtime/budget.hpp"

namespace plimsoll::runtime {

struct PhysicalDevice {
  DeviceName name;           // physical (logical == -1)
  std::string hardware;      // GPU name, "host", "simulated device"
  PhysicalMemory memory;
  std::string details;       // UUID, PCI bus id, compute capability; the host's cgroup limit
  std::string uuid;          // cuda:N only: "GPU-...", which names its shared ledger
  // cuda:N only: the driver's ordinal of this GPU. plimsoll's N is renumbered by PLIMSOLL_VISIBLE_DEVICES
  // (name.index), the driver's is not; -1 until find_physical sets it.
  int driver_ordinal = -1;
};

/// A device's backing and what it can do. Only CUDA devices without virtual memory management are not
/// growable: their backing takes a reservation's memory at once (cuMemAlloc), so only preallocate fits.
struct DeviceBacking {
  std::unique_ptr<backings::Backing> backing;
  bool growable = true;
  std::string fallback_reason;  // why a GPU got plain regions; empty when growable
};

PhysicalDevice describe_host(const HostInfo& host);
/// cpu-pinned: the host's memory, page-locked through the CUDA driver.
PhysicalDevice describe_pinned_host(const HostInfo& host);
/// `gpu.ordinal` is plimsoll's cuda:N (after PLIMSOLL_VISIBLE_DEVICES).
PhysicalDevice describe_gpu(const GpuInfo& gpu);
PhysicalDevice describe_sim(std::uint64_t bytes);

/// A fresh backing for the device. `driver` is the loaded CUDA driver, needed for cuda:N only (null when none
/// was loaded). Throws DeviceUnavailable when the device cannot be backed.
DeviceBacking make_backing(const PhysicalDevice& device, const cuda_driver::Api* driver);

/// Why the device cannot be backed (a GPU listed with no driver loaded: hardware injected by a test), or
/// empty when it can.
std::string missing_backing_reason(DeviceKind kind, bool driver_loaded);
/// The same for a device name: cpu-pinned also needs the driver (it registers the memory with it).
std::string missing_backing_reason(const DeviceName& name, bool driver_loaded);

}  // namespace plimsoll::runtime
