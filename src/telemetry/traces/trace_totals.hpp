#pragma once
// A trace's totals (Trace::allocations, frees, peak_live_bytes), counted the one way for every producer of a Trace:
// the readers count event by event as they parse (after their own checks, so a bad line fails with its own
// message), and repeat_last_step recounts the trace it rebuilt.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "plimsoll/trace.hpp"

namespace plimsoll::telemetry {

/// The live bytes of a trace being counted, and its totals in the Trace itself.
class TraceTotals {
 public:
  /// Whether an allocation of `bytes` keeps the live bytes below 2^64 (a reader fails the line when not).
  bool fits(std::uint64_t bytes) const { return bytes <= std::numeric_limits<std::uint64_t>::max() - live_bytes_; }
  void allocated(Trace& trace, std::uint64_t bytes) {
    live_bytes_ += bytes;
    trace.peak_live_bytes = std::max(trace.peak_live_bytes, live_bytes_);
    ++trace.allocations;
  }
  /// `bytes`: what the freed block's allocation took (a free event carries no size).
  void freed(Trace& trace, std::uint64_t bytes) {
    live_bytes_ -= bytes;
    ++trace.frees;
  }
  std::uint64_t live_bytes() const { return live_bytes_; }

 private:
  std::uint64_t live_bytes_ = 0;
};

/// Counts `trace`'s totals again from its events (their slots below trace.slots), as the readers counted them.
inline void recount_totals(Trace& trace) {
  trace.allocations = 0;
  trace.frees = 0;
  trace.peak_live_bytes = 0;
  std::vector<std::uint64_t> slot_bytes(trace.slots, 0);
  TraceTotals totals;
  for (const TraceEvent& event : trace.events) {
    if (event.kind == TraceEvent::Kind::allocate) {
      slot_bytes[event.slot] = event.bytes;
      totals.allocated(trace, event.bytes);
    } else if (event.kind == TraceEvent::Kind::free) {
      totals.freed(trace, slot_bytes[event.slot]);
      slot_bytes[event.slot] = 0;
    }
  }
}

}  // namespace plimsoll::telemetry
