#pragma once
// Timing single allocator calls. A call takes a few nanoseconds, about what one steady_clock read costs, so a
// per-call time read with steady_clock is mostly clock. The TSC is read in a handful of cycles; its own cost is
// measured once and subtracted, and its rate is calibrated against steady_clock.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define PLIMSOLL_BENCH_HAVE_TSC 1
#endif

namespace plimsoll::bench {

class CycleClock {
 public:
  /// Ticks now. The fence keeps the read from drifting before the work it is meant to follow.
  static std::uint64_t now() noexcept {
#ifdef PLIMSOLL_BENCH_HAVE_TSC
    _mm_lfence();
    const std::uint64_t ticks = __rdtsc();
    _mm_lfence();
    return ticks;
#else
    return static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
#endif
  }

  /// Spins for `window` to learn the tick rate, then measures the cost of an empty timed region.
  static CycleClock calibrate(std::chrono::milliseconds window = std::chrono::milliseconds(50)) {
    using std::chrono::steady_clock;
    CycleClock clock;
    const auto wall_start = steady_clock::now();
    const std::uint64_t tick_start = now();
    while (steady_clock::now() - wall_start < window) {
    }
    const auto wall_ns = std::chrono::duration<double, std::nano>(steady_clock::now() - wall_start).count();
    const std::uint64_t ticks = now() - tick_start;
    clock.ns_per_tick_ = wall_ns / static_cast<double>(std::max<std::uint64_t>(ticks, 1));

    std::vector<std::uint64_t> empty(10001);
    for (auto& sample : empty) {
      const std::uint64_t begin = now();
      sample = now() - begin;
    }
    std::nth_element(empty.begin(), empty.begin() + static_cast<std::ptrdiff_t>(empty.size() / 2), empty.end());
    clock.overhead_ticks_ = empty[empty.size() / 2];
    return clock;
  }

  /// Nanoseconds of a timed region, less the cost of timing it (never below zero).
  double to_ns(std::uint64_t ticks) const noexcept {
    const std::uint64_t net = ticks > overhead_ticks_ ? ticks - overhead_ticks_ : 0;
    return static_cast<double>(net) * ns_per_tick_;
  }
  double ns_per_tick() const noexcept { return ns_per_tick_; }
  double overhead_ns() const noexcept { return static_cast<double>(overhead_ticks_) * ns_per_tick_; }

 private:
  double ns_per_tick_ = 1.0;
  std::uint64_t overhead_ticks_ = 0;
};

}  // namespace plimsoll::bench
