#pragma once
// The one rule for what a process under a share is shown of its GPU. The interposer answers cuMemGetInfo and
// cuDeviceTotalMem with it (DriverGovernor), and a Runtime plans its devices on a shared GPU over it
// (runtime/gpu_sharing.hpp), so a job sees the same GPU whichever of the two governs it.
#include <cstdint>

namespace plimsoll::sharing {

struct GpuMemoryView {
  std::uint64_t free_bytes = 0;
  std::uint64_t total_bytes = 0;
  friend bool operator==(const GpuMemoryView&, const GpuMemoryView&) = default;
};

/// The GPU the driver shows (`driver`) as a process holding a share with this `cap` sees it: its total at most the
/// cap, its free memory at most `headroom` (what the ledger would charge the process now).
GpuMemoryView seen_under_share(GpuMemoryView driver, std::uint64_t cap, std::uint64_t headroom);

}  // namespace plimsoll::sharing
