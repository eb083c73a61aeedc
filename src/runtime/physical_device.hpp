#pragma once
// A physical device as the runtime sees it: what it is, what memory it has, and where its memory comes from.
#include <memory>
#include <string>

#include "backings/backing.hpp"
#include "plimsoll/device.hpp"
#include "runtime/budget.hpp"

namespace plimsoll::runtime {

struct PhysicalDevice {
  DeviceName name;           // physical (logical == -1)
  std::string hardware;      // GPU name, "host", "simulated device"
  PhysicalMemory memory;
  std::string details;       // UUID, PCI bus id, compute capability; the host's cgroup limit
};

PhysicalDevice describe_host(const HostInfo& host);
/// `gpu.ordinal` is plimsoll's cuda:N (after PLIMSOLL_VISIBLE_DEVICES).
PhysicalDevice describe_gpu(const GpuInfo& gpu);
PhysicalDevice describe_sim(std::uint64_t bytes);

/// A fresh backing for the device. Throws DeviceUnavailable for kinds this build cannot back.
std::unique_ptr<backings::Backing> make_backing(const PhysicalDevice& device);

/// Why this build cannot create the device, or empty when it can.
std::string missing_backing_reason(DeviceKind kind);

}  // namespace plimsoll::runtime
