#pragma once
// Timestamps for recorded events. A recorded event has a budget of 25 ns in all; a steady_clock read (a vDSO
// call) takes about as long by itself, while the TSC is read in a few cycles. Ticks are turned into nanoseconds
// with a rate calibrated once per process against steady_clock. Modern x86 TSCs run at a constant rate across
// cores and power states; elsewhere steady_clock is used directly.
#include <chrono>
#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define PLIMSOLL_EVENT_CLOCK_TSC 1
#endif

namespace plimsoll::telemetry {

class EventClock {
 public:
  /// Starts the clock at zero now. The first EventClock in a process spends about 2 ms calibrating.
  EventClock();

  std::uint64_t now_ns() const noexcept {
#ifdef PLIMSOLL_EVENT_CLOCK_TSC
    const std::uint64_t ticks = __rdtsc();
    return ticks <= origin_ticks_ ? 0 : static_cast<std::uint64_t>(static_cast<double>(ticks - origin_ticks_) * ns_per_tick_);
#else
    const auto now = std::chrono::steady_clock::now().time_since_epoch();
    const auto ns = static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(now).count());
    return ns <= origin_ticks_ ? 0 : ns - origin_ticks_;
#endif
  }

 private:
  std::uint64_t origin_ticks_ = 0;
  double ns_per_tick_ = 1.0;
};

}  // namespace plimsoll::telemetry
