#include "plan/step_sequence.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

namespace plimsoll::plan {

StepSequence cut_steps(const Trace& trace, std::size_t steps) {
  steps = std::min(steps, trace.steps.size());
  constexpr std::uint32_t kNotModelled = std::numeric_limits<std::uint32_t>::max();
  std::vector<std::uint32_t> allocation_of_slot(trace.slots, kNotModelled);
  StepSequence sequence;
  sequence.segment_begin.push_back(0);

  const std::size_t stop = steps == 0 ? trace.events.size() : trace.steps[steps - 1].end;
  std::size_t next_step = 0;        // index into trace.steps of the step not yet begun
  bool modelling = true;            // false from a cut to the next step's begin
  std::uint32_t segment = 0;
  for (std::size_t index = 0; index < stop; ++index) {
    const TraceEvent& event = trace.events[index];
    if (next_step < steps && index == trace.steps[next_step].begin) {
      ++segment;
      sequence.segment_begin.push_back(sequence.ops.size());
      ++next_step;
      modelling = true;
    }
    if (event.kind == TraceEvent::Kind::marker) {
      // Before the first step a marker is a note (the job marker is one); inside a step (TraceStep::end is the
      // index of the step's end marker) any marker ends the step.
      if (segment > 0) modelling = false;
      continue;
    }
    if (event.kind == TraceEvent::Kind::allocate) {
      if (!modelling) continue;
      allocation_of_slot[event.slot] = static_cast<std::uint32_t>(sequence.allocations.size());
      sequence.allocations.push_back(
          {.bytes = event.bytes, .tag = event.tag, .site = event.site, .segment = segment});
      sequence.ops.push_back({.allocation = allocation_of_slot[event.slot], .is_free = false});
    } else if (event.kind == TraceEvent::Kind::free) {
      const std::uint32_t allocation = allocation_of_slot[event.slot];
      if (allocation == kNotModelled) continue;
      allocation_of_slot[event.slot] = kNotModelled;
      sequence.ops.push_back({.allocation = allocation, .is_free = true});
    }
  }
  return sequence;
}

}  // namespace plimsoll::plan
