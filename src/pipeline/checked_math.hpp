#pragma once
// Byte counts of the pipeline layer are products of user input (shape x batch x dtype x queue), so every
// product and sum is checked: a result past 2^64 must be reported, never wrapped.
#include <cstdint>
#include <optional>

namespace plimsoll::pipeline {

/// a x b, or nothing if it does not fit in 64 bits.
inline std::optional<std::uint64_t> checked_multiply(std::uint64_t a, std::uint64_t b) {
  std::uint64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product)) return std::nullopt;
  return product;
}

/// a + b, or nothing if it does not fit in 64 bits.
inline std::optional<std::uint64_t> checked_add(std::uint64_t a, std::uint64_t b) {
  std::uint64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum)) return std::nullopt;
  return sum;
}

}  // namespace plimsoll::pipeline
