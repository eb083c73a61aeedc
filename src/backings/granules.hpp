#pragma once
// Granule sizes shared by the backings. Granules are powers of two: round to them with util::align_up,
// align_down and is_aligned (util/checked_math.hpp).
#include <cstdint>

#include "util/checked_math.hpp"

namespace plimsoll::backings {

inline constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
/// The granule of CUDA's virtual memory API on current GPUs; the host uses it too so that heaps can be
/// backed by transparent huge pages.
inline constexpr std::uint64_t kDefaultGranularity = 2 * kMiB;

}  // namespace plimsoll::backings
