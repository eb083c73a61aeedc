#pragma once
// How many bytes a device may use, from its policy and what the hardware has.
#include <cstdint>
#include <string>
#include <vector>

#include "plimsoll/device.hpp"
#include "plimsoll/policy.hpp"

namespace plimsoll::runtime {

/// What a physical device has, as the budget rules see it.
struct PhysicalMemory {
  DeviceKind kind = DeviceKind::cpu;
  std::uint64_t total_bytes = 0;    // the hardware's capacity
  std::uint64_t free_bytes = 0;     // what it reports free now (others' use excluded)
  // The most this process can ever get: the total for GPUs and simulated devices; for the host the smaller
  // of RAM and the cgroup limit, since the cgroup kills the process before RAM runs out.
  std::uint64_t ceiling_bytes = 0;
  int compute_major = 0;  // cuda: the compute capability's major version, for the default reserve; 0: unknown
  bool pinned = false;    // cpu-pinned: page-locked host memory, limited by default to a share of the host's
};

/// cpu-pinned's default limit is the host's capacity (RAM, or the cgroup limit) divided by this. Page-locked
/// memory cannot be swapped or reclaimed, so the kernel can no longer make room for everything else in the
/// process (and the machine); staging buffers for copies to a GPU need a few batches, not most of RAM.
inline constexpr std::uint64_t kPinnedDefaultShareDivisor = 8;

/// The reserve when the policy sets none. cuda: TensorFlow's per-compute-capability floor (gpu_device.cc,
/// MinSystemMemory: 225 MiB below 2 GiB; 500 MiB up to 6.x, 1050 MiB for 7.x, 1536 MiB from 8.0), at least 5%
/// of the total, at most a quarter of it; with the capability unknown, default_reserve (a 512 MiB floor).
/// Other kinds: default_reserve.
std::uint64_t default_reserve_for(const PhysicalMemory& memory);

struct Budget {
  Policy policy;                // with reserve filled in
  std::uint64_t limit_bytes = 0;
  std::uint64_t reserve_bytes = 0;
  std::uint64_t capacity_bytes = 0;  // ceiling - reserve: the most any limit may be
};

/// The reserve: the policy's, else default_reserve_for(memory). The limit's rules, in order:
///   memory_limit when set; else memory_fraction * ceiling; else
///   cuda: free - reserve (what is free now, so another process's memory is left alone, as TensorFlow does);
///   sim and cpu: ceiling - reserve; cpu-pinned: at most ceiling / kPinnedDefaultShareDivisor. The host's MemAvailable is not used: it moves with the page cache,
///   and on-demand growth only takes what it uses.
/// A limit above ceiling - reserve throws InvalidArgument naming both numbers and the fix.
Budget compute_budget(const std::string& device, const PhysicalMemory& memory, const Policy& policy);

/// Each logical device's limit in bytes, in the split's order: a sized one gets its size; the equal-share ones
/// divide what the physical budget's limit leaves after the sized ones (rounded down to whole MiB when a share is
/// at least one MiB, so that shares stay granule-friendly). Throws InvalidArgument, naming the numbers and the fix,
/// for an empty split, a size of 0, sizes that add up to more than the device can give, or equal shares that come
/// to nothing.
std::vector<std::uint64_t> logical_limits(const std::string& device, const PhysicalMemory& memory,
                                          const Budget& physical, const std::vector<LogicalDeviceConfig>& split);

}  // namespace plimsoll::runtime
