#include "telemetry/recording/event_clock.hpp"

#include <thread>

namespace plimsoll::telemetry {
namespace {

#ifdef PLIMSOLL_EVENT_CLOCK_TSC
// Ticks per nanosecond do not change while the process runs: measured once, over a 2 ms window (the rate is then
// within about 0.1%, plenty for timelines of runs that last seconds to hours).
double measure_ns_per_tick() {
  using std::chrono::steady_clock;
  const auto wall_start = steady_clock::now();
  const std::uint64_t tick_start = __rdtsc();
  while (steady_clock::now() - wall_start < std::chrono::milliseconds(2)) std::this_thread::yield();
  const double wall_ns = std::chrono::duration<double, std::nano>(steady_clock::now() - wall_start).count();
  const std::uint64_t ticks = __rdtsc() - tick_start;
  return ticks == 0 ? 1.0 : wall_ns / static_cast<double>(ticks);
}
#endif

}  // namespace

EventClock::EventClock() {
#ifdef PLIMSOLL_EVENT_CLOCK_TSC
  static const double ns_per_tick = measure_ns_per_tick();
  ns_per_tick_ = ns_per_tick;
  origin_ticks_ = __rdtsc();
#else
  origin_ticks_ = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
#endif
}

}  // namespace plimsoll::telemetry
