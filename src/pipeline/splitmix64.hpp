#pragma once
// SplitMix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number generators", 2014), the generator behind
// java.util.SplittableRandom and the one xoshiro's authors give for seeding. It is fully specified by the few lines
// below, in 64-bit unsigned arithmetic only, so a seed gives the same numbers on every platform and standard
// library; std::uniform_int_distribution does not (each library has its own algorithm).
// Invariant: the state advances by an odd constant, so it visits all 2^64 values before repeating, and next()'s
// output is a bijection of the state: consecutive seeds (a base plus a sample index) give unrelated streams.
#include <cstdint>

namespace plimsoll::pipeline {

class SplitMix64 {
 public:
  explicit constexpr SplitMix64(std::uint64_t seed) noexcept : state_(seed) {}

  constexpr std::uint64_t next() noexcept {
    state_ += 0x9e3779b97f4a7c15ULL;  // 2^64 / golden ratio, odd
    std::uint64_t z = state_;
    z = (z ^ (z >> 30U)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27U)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31U);
  }

  /// A number in [0, n), n >= 1. Plain modulo: its bias, below n / 2^64, is far beyond what any run could observe.
  constexpr std::uint64_t below(std::uint64_t n) noexcept { return next() % n; }

 private:
  std::uint64_t state_;
};

}  // namespace plimsoll::pipeline
