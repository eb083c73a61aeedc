#pragma once
// Granule arithmetic shared by the backings. Granules are powers of two, so rounding is a mask.
#include <bit>
#include <cstdint>

namespace plimsoll::backings {

inline constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
/// The granule of CUDA's virtual memory API on current GPUs; the host uses it too so that heaps can be
/// backed by transparent huge pages.
inline constexpr std::uint64_t kDefaultGranularity = 2 * kMiB;

constexpr bool is_power_of_two(std::uint64_t value) noexcept { return std::has_single_bit(value); }

/// `granule` must be a power of two.
constexpr std::uint64_t round_down(std::uint64_t value, std::uint64_t granule) noexcept {
  return value & ~(granule - 1);
}

/// `granule` must be a power of two; `value` must leave room below 2^64 for the rounding.
constexpr std::uint64_t round_up(std::uint64_t value, std::uint64_t granule) noexcept {
  return round_down(value + (granule - 1), granule);
}

constexpr bool is_aligned(std::uint64_t value, std::uint64_t granule) noexcept {
  return (value & (granule - 1)) == 0;
}

}  // namespace plimsoll::backings
