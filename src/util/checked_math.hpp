#pragma once
// Overflow-checked and aligned arithmetic on byte counts and addresses, for every layer. Sizes come from user
// input (limits, shapes x batch x dtype, trace files), so a sum or product past 2^64 must be reported, never
// wrapped; the checked forms return nothing instead.
#include <bit>
#include <cstdint>
#include <limits>
#include <optional>

namespace plimsoll::util {

/// a + b, or nothing if it does not fit in 64 bits.
constexpr std::optional<std::uint64_t> checked_add(std::uint64_t a, std::uint64_t b) noexcept {
  std::uint64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum)) return std::nullopt;
  return sum;
}

/// a x b, or nothing if it does not fit in 64 bits.
constexpr std::optional<std::uint64_t> checked_multiply(std::uint64_t a, std::uint64_t b) noexcept {
  std::uint64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product)) return std::nullopt;
  return product;
}

/// a + b, or the largest value where that would not fit: for totals that are reported, never used as a size.
constexpr std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b) noexcept {
  return checked_add(a, b).value_or(std::numeric_limits<std::uint64_t>::max());
}

/// a - b, or 0 where b is larger.
constexpr std::uint64_t saturating_subtract(std::uint64_t a, std::uint64_t b) noexcept { return a > b ? a - b : 0; }

constexpr bool is_power_of_two(std::uint64_t value) noexcept { return std::has_single_bit(value); }

// --- multiples of any positive number (`multiple` > 0) ---

constexpr std::uint64_t round_down(std::uint64_t value, std::uint64_t multiple) noexcept {
  return value / multiple * multiple;
}

/// The least multiple of `multiple` at or above `value`, or nothing if it does not fit in 64 bits.
constexpr std::optional<std::uint64_t> checked_round_up(std::uint64_t value, std::uint64_t multiple) noexcept {
  const std::uint64_t remainder = value % multiple;
  return remainder == 0 ? std::optional<std::uint64_t>(value) : checked_add(value, multiple - remainder);
}

/// As checked_round_up, where the caller knows the result fits (e.g. value below 2^62).
constexpr std::uint64_t round_up(std::uint64_t value, std::uint64_t multiple) noexcept {
  const std::uint64_t remainder = value % multiple;
  return remainder == 0 ? value : value + (multiple - remainder);
}

// --- powers of two (`alignment` a power of two): masks, for granules and pages ---

constexpr std::uint64_t align_down(std::uint64_t value, std::uint64_t alignment) noexcept {
  return value & ~(alignment - 1);
}

/// `value` must leave room below 2^64 for the rounding (checked_round_up when it may not).
constexpr std::uint64_t align_up(std::uint64_t value, std::uint64_t alignment) noexcept {
  return align_down(value + (alignment - 1), alignment);
}

constexpr bool is_aligned(std::uint64_t value, std::uint64_t alignment) noexcept {
  return (value & (alignment - 1)) == 0;
}

}  // namespace plimsoll::util
