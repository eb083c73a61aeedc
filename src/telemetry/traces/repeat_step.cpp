#include "telemetry/traces/repeat_step.hpp"

#include "telemetry/traces/trace_totals.hpp"

#include <algorithm>
#include <cstdint>
#include <deque>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "plimsoll/error.hpp"

namespace plimsoll::telemetry {
namespace {

constexpr std::uint32_t kNone = std::numeric_limits<std::uint32_t>::max();

// What the last step does with its blocks, as the copies need it.
struct StepShape {
  std::vector<std::uint32_t> index_in_step;  // by slot: its place among the step's allocations, kNone if older
  std::uint32_t allocations = 0;
  // By older slot freed in the step: the step's leftover that takes its place (kNone: unpaired).
  std::vector<std::uint32_t> successor;
  std::vector<bool> paired;                        // by slot: a leftover some older block's free hands on
  std::vector<std::uint32_t> unpaired_leftovers;  // slots the step allocates and keeps with no older copy freed
};

StepShape shape_of(const Trace& trace, const TraceStep& step) {
  std::vector<std::uint64_t> bytes(trace.slots, 0);
  std::vector<std::size_t> born(trace.slots, 0);
  for (std::size_t index = 0; index < trace.events.size(); ++index) {
    const TraceEvent& event = trace.events[index];
    if (event.kind == TraceEvent::Kind::allocate && event.slot < trace.slots) {
      bytes[event.slot] = event.bytes;
      born[event.slot] = index;
    }
  }
  StepShape shape;
  shape.index_in_step.assign(trace.slots, kNone);
  shape.successor.assign(trace.slots, kNone);
  shape.paired.assign(trace.slots, false);
  std::vector<bool> freed_in_step(trace.slots, false);
  std::vector<std::uint32_t> allocated;
  std::vector<std::uint32_t> older_freed;
  for (std::size_t index = step.begin; index < step.end; ++index) {
    const TraceEvent& event = trace.events[index];
    if (event.kind == TraceEvent::Kind::allocate) {
      shape.index_in_step[event.slot] = shape.allocations++;
      allocated.push_back(event.slot);
    } else if (event.kind == TraceEvent::Kind::free) {
      freed_in_step[event.slot] = true;
      if (shape.index_in_step[event.slot] == kNone) older_freed.push_back(event.slot);
    }
  }
  // Leftovers by size, in birth order; older blocks take them in their own birth order.
  std::map<std::uint64_t, std::deque<std::uint32_t>> leftovers;
  for (const std::uint32_t slot : allocated) {
    if (!freed_in_step[slot]) leftovers[bytes[slot]].push_back(slot);
  }
  std::sort(older_freed.begin(), older_freed.end(),
            [&born](std::uint32_t a, std::uint32_t b) { return born[a] < born[b]; });
  for (const std::uint32_t older : older_freed) {
    auto found = leftovers.find(bytes[older]);
    if (found == leftovers.end() || found->second.empty()) continue;
    shape.successor[older] = found->second.front();
    shape.paired[found->second.front()] = true;
    found->second.pop_front();
  }
  for (const std::uint32_t slot : allocated) {
    if (!freed_in_step[slot] && !shape.paired[slot]) shape.unpaired_leftovers.push_back(slot);
  }
  return shape;
}

}  // namespace

void check_step_repeats(std::size_t times) {
  if (times > kMaxStepRepeats) {
    throw InvalidArgument(fmt::format("--repeat-last-step {} is over the {} repeats it takes; use at most {}", times,
                                      kMaxStepRepeats, kMaxStepRepeats));
  }
}

Trace repeat_last_step(Trace trace, std::size_t times) {
  check_step_repeats(times);
  if (times == 0) return trace;  // any trace, with steps or without
  if (trace.steps.empty()) {
    throw InvalidArgument(fmt::format("{} has no training steps to repeat (no 'step N begin/end' markers and no "
                                      "repeating pattern found); drop --repeat-last-step for this trace",
                                      trace.origin));
  }
  const TraceStep last = trace.steps.back();
  const StepShape shape = shape_of(trace, last);
  const std::uint64_t slots = std::uint64_t{trace.slots} + std::uint64_t{times} * shape.allocations;
  if (slots >= kNone) {
    throw InvalidArgument(fmt::format("--repeat-last-step {} on {} needs {} allocations, more than 2^32; use a "
                                      "smaller count",
                                      times, trace.origin, slots));
  }
  const bool with_markers = trace.step_source == StepSource::markers;
  // With markers a step is [begin marker + 1, end marker); a copy goes after the end marker, wrapped in its own.
  const std::size_t insert_at = with_markers ? last.end + 1 : last.end;

  // The events are rebuilt beside the trace's own (read while copying), then replace them; markers are appended.
  std::vector<TraceEvent> events(trace.events.begin(), trace.events.begin() + static_cast<std::ptrdiff_t>(insert_at));
  // Copies and the teardown after them move on in time by one step each (its markers included), so a timeline
  // stays in order.
  const std::size_t copied_from = with_markers && last.begin > 0 ? last.begin - 1 : last.begin;
  const std::uint64_t period_ns = trace.has_times && insert_at > copied_from
                                      ? trace.events[insert_at - 1].time_ns - trace.events[copied_from].time_ns + 1
                                      : 0;
  const auto slot_in_copy = [&](std::uint32_t slot, std::size_t copy) {
    return copy == 0 ? slot
                     : static_cast<std::uint32_t>(trace.slots + (copy - 1) * shape.allocations +
                                                  shape.index_in_step[slot]);
  };
  const auto push_marker = [&](const std::string& text, const TraceEvent& like, std::uint64_t shift_ns) {
    TraceEvent marker = like;
    marker.kind = TraceEvent::Kind::marker;
    marker.slot = static_cast<std::uint32_t>(trace.markers.size());
    marker.time_ns += shift_ns;
    trace.markers.push_back(text);
    events.push_back(marker);
  };
  for (std::size_t copy = 1; copy <= times; ++copy) {
    const int number = last.number + static_cast<int>(copy);
    const TraceEvent& edge = trace.events[last.begin == 0 ? 0 : last.begin - 1];
    if (with_markers) push_marker(fmt::format("step {} begin", number), edge, copy * period_ns);
    const std::size_t begin = events.size();
    for (std::size_t index = last.begin; index < last.end; ++index) {
      TraceEvent event = trace.events[index];
      event.time_ns += copy * period_ns;
      if (event.kind == TraceEvent::Kind::allocate) {
        event.slot = slot_in_copy(event.slot, copy);
      } else if (event.kind == TraceEvent::Kind::free) {
        if (shape.index_in_step[event.slot] != kNone) {
          event.slot = slot_in_copy(event.slot, copy);
        } else if (shape.successor[event.slot] != kNone) {
          event.slot = slot_in_copy(shape.successor[event.slot], copy - 1);
        } else {
          continue;  // the original step freed it; it is gone
        }
      }  // a note inside the step is copied as it is (a marked step holds no step marker)
      events.push_back(event);
    }
    const std::size_t end = events.size();
    trace.steps.push_back(TraceStep{number, begin, end});
    if (with_markers) push_marker(fmt::format("step {} end", number), trace.events[last.end], copy * period_ns);
  }
  // The teardown: first the copies' unpaired leftovers, then the trace's own, the paired ones on the last copy.
  // Their frees come first in the teardown, so they take the time of its first event.
  const TraceEvent& teardown_like = trace.events[std::min(insert_at, trace.events.size() - 1)];
  for (std::size_t copy = 1; copy <= times; ++copy) {
    for (const std::uint32_t slot : shape.unpaired_leftovers) {
      TraceEvent free_event = teardown_like;
      free_event.kind = TraceEvent::Kind::free;
      free_event.slot = slot_in_copy(slot, copy);
      free_event.bytes = 0;
      free_event.time_ns += times * period_ns;
      events.push_back(free_event);
    }
  }
  for (std::size_t index = insert_at; index < trace.events.size(); ++index) {
    TraceEvent event = trace.events[index];
    event.time_ns += times * period_ns;
    if (event.kind == TraceEvent::Kind::free && shape.paired[event.slot]) {
      event.slot = slot_in_copy(event.slot, times);
    }
    events.push_back(event);
  }
  trace.events = std::move(events);

  trace.slots = static_cast<std::uint32_t>(slots);
  recount_totals(trace);
  return trace;
}

}  // namespace plimsoll::telemetry
