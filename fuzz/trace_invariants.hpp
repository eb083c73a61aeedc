#pragma once
// What every trace a reader returns promises its users (replay and the leak watch index vectors by slot, tag,
// site and device without checking): the fuzz targets of every trace format abort when one does not hold.
#include <cstdlib>
#include <vector>

#include "plimsoll/trace.hpp"

namespace plimsoll::fuzzing {

/// `slots_are_ordinals`: the text format numbers allocations in order; other formats may reuse a freed slot.
inline void check_trace_invariants(const Trace& trace, bool slots_are_ordinals) {
  std::size_t allocations = 0;
  std::size_t frees = 0;
  std::vector<bool> live(trace.slots, false);
  for (const TraceEvent& event : trace.events) {
    if (event.tag >= trace.tags.size() || event.site >= trace.sites.size() || event.device >= trace.devices.size()) {
      std::abort();
    }
    switch (event.kind) {
      case TraceEvent::Kind::allocate:
        if (event.slot >= trace.slots || live[event.slot]) std::abort();
        if (slots_are_ordinals && event.slot != allocations) std::abort();
        live[event.slot] = true;
        ++allocations;
        break;
      case TraceEvent::Kind::free:
        if (event.slot >= trace.slots || !live[event.slot]) std::abort();
        live[event.slot] = false;
        ++frees;
        break;
      case TraceEvent::Kind::marker:
        if (event.slot >= trace.markers.size()) std::abort();
        break;
      case TraceEvent::Kind::map:
      case TraceEvent::Kind::unmap:
      case TraceEvent::Kind::oom:
        break;
    }
  }
  if (allocations != trace.allocations || frees != trace.frees) std::abort();
  if (slots_are_ordinals && trace.slots != allocations) std::abort();
  for (const TraceStep& step : trace.steps) {
    if (step.begin == 0 || step.begin > step.end || step.end >= trace.events.size()) std::abort();
    if (trace.events[step.end].kind != TraceEvent::Kind::marker) std::abort();
  }
}

}  // namespace plimsoll::fuzzing
