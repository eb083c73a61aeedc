#pragma once
// The driver calls sharing::DriverGovernor makes, stood in for a 1 GiB GPU whose context is current on every thread
// (the governor's tests run without a GPU).
#include <cstdint>

#include "sharing/driver_governor.hpp"

namespace plimsoll::testing_support {

inline constexpr std::uint64_t kGpuBytes = std::uint64_t{1024} << 20;

inline sharing::DriverCalls stand_in_driver() {
  namespace cu = cuda_driver;
  sharing::DriverCalls calls;
  calls.ctx_get_device = [](cu::Device* device) {
    *device = 0;
    return cu::kSuccess;
  };
  calls.device_get_uuid = [](cu::Uuid* uuid, cu::Device) {
    for (unsigned char& byte : uuid->bytes) byte = 0x42;
    return cu::kSuccess;
  };
  calls.device_total_mem = [](std::size_t* bytes, cu::Device) {
    *bytes = kGpuBytes;
    return cu::kSuccess;
  };
  calls.mem_get_info = [](std::size_t* free_bytes, std::size_t* total_bytes) {
    *free_bytes = kGpuBytes;
    *total_bytes = kGpuBytes;
    return cu::kSuccess;
  };
  return calls;
}

}  // namespace plimsoll::testing_support
