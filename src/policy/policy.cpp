#include "plimsoll/policy.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "plimsoll/error.hpp"
#include "plimsoll/size.hpp"

namespace plimsoll {
namespace {

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;

}  // namespace

void Policy::validate() const {
  if (memory_limit && memory_fraction) {
    throw InvalidArgument(fmt::format(
        "set memory_limit or memory_fraction, not both (memory_limit {}, memory_fraction {}); remove one of them",
        format_size(*memory_limit), *memory_fraction));
  }
  if (memory_limit && *memory_limit == 0) {
    throw InvalidArgument(
        "memory_limit must be more than 0 bytes; give a size such as \"8GiB\", or leave it unset for the device's "
        "default");
  }
  // Written so that NaN fails too: every comparison with NaN is false.
  if (memory_fraction && !(*memory_fraction > 0.0 && *memory_fraction <= 1.0)) {
    throw InvalidArgument(fmt::format(
        "memory_fraction must be a number in (0, 1], got {}; give the share of the device's total memory to use, "
        "e.g. 0.9",
        *memory_fraction));
  }
  // reserve and release_threshold: every value means something (0 reserve: take it all; 0 threshold: keep no
  // cached free memory mapped), and whether a reserve fits depends on the device, checked when it is created.
}

// CUDA: memory the process needs on the GPU that never passes through plimsoll.
//   - the CUDA context: ~300-500 MiB on current GPUs, more with lazily loaded kernel modules as they are used;
//   - local memory for thread stacks, sized by SM count x resident threads: it grows with the GPU;
//   - cuBLAS workspaces (per handle and stream), cuDNN convolution workspaces (hundreds of MiB for some
//     algorithms), NCCL communication buffers, all allocated by those libraries directly.
// The floor of 512 MiB covers the context and a few workspaces on any GPU; 5% follows the parts that grow with the
// device and the workloads big GPUs run (4 GiB of an 80 GiB H100). The cap of a quarter keeps small or simulated
// devices usable: a 1 GiB device keeps 768 MiB rather than half of it.
// CPU: the OS, the page cache and the framework's own malloc (Python objects, dataloader workers) share the host;
// a tenth, at most 1 GiB, keeps a cgroup-limited container from being OOM-killed at the last byte of its limit.
// sim: nothing else lives on a simulated device.
std::uint64_t default_reserve(DeviceKind kind, std::uint64_t total_bytes) {
  switch (kind) {
    case DeviceKind::cuda:
      return std::min(std::max(512 * kMiB, total_bytes / 20), total_bytes / 4);
    case DeviceKind::cpu:
      return std::min(kGiB, total_bytes / 10);
    case DeviceKind::sim:
      return 0;
  }
  return 0;
}

}  // namespace plimsoll
