#include "telemetry/replay/replay.hpp"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <fmt/format.h>

#include "plimsoll/device.hpp"
#include "plimsoll/error.hpp"
#include "plimsoll/oom.hpp"
#include "plimsoll/policy.hpp"
#include "plimsoll/stats.hpp"

namespace plimsoll::telemetry {
namespace {

constexpr std::size_t kPageBytes = 4096;

// Only host memory can be written from here: simulated devices hand out synthetic addresses and GPU memory
// is not mapped into this process.
bool memory_is_touchable(const Allocator& allocator) {
  try {
    return DeviceName::parse(allocator.description().name).kind == DeviceKind::cpu;
  } catch (const InvalidArgument&) {
    return false;
  }
}

void touch_pages(void* block, std::uint64_t bytes) {
  // volatile: the writes are the point, the compiler must not drop them as dead stores.
  volatile char* const bytes_of_block = static_cast<char*>(block);
  for (std::uint64_t offset = 0; offset < bytes; offset += kPageBytes) {
    bytes_of_block[static_cast<std::size_t>(offset)] = 0;
  }
}

// The blocks the replay holds, by slot. Frees what is still live when it goes away, so neither an OOM stop nor
// an exception leaves the allocator holding the trace's memory.
class LiveBlocks {
 public:
  LiveBlocks(Allocator& allocator, std::uint32_t slots) : allocator_(allocator), blocks_(slots, nullptr) {}
  LiveBlocks(const LiveBlocks&) = delete;
  LiveBlocks& operator=(const LiveBlocks&) = delete;
  ~LiveBlocks() { free_all(); }

  void*& operator[](std::uint32_t slot) { return blocks_[slot]; }

  void free_all() noexcept {
    for (void*& block : blocks_) {
      if (block == nullptr) continue;
      try {
        allocator_.deallocate(block);
      } catch (const Error&) {
        // Cleanup after a failure: the first error is the one worth reporting, so this one is dropped.
      }
      block = nullptr;
    }
  }

 private:
  Allocator& allocator_;
  std::vector<void*> blocks_;
};

}  // namespace

ReplayResult replay(const Trace& trace, Allocator& allocator, const ReplayOptions& options) {
  ReplayResult result;
  result.trace = trace.origin;
  result.device = allocator.description().name;
  result.policy = std::string(to_string(allocator.description().policy.growth));
  result.peak_live_bytes = trace.peak_live_bytes;
  result.steps = trace.steps.size();
  result.steps_from = to_string(trace.step_source);

  const bool touch = options.touch_memory && memory_is_touchable(allocator);
  // Steady state starts where the first step ends (its "# step N end" marker, or the first event of the next
  // detected step); without steps there is none.
  const std::size_t steady_from = trace.steps.empty() ? trace.events.size() : trace.steps.front().end;

  // The trace's tag names, as this process's tags, so the device's per-tag stats follow the recording.
  std::vector<Tag> tags;
  tags.reserve(trace.tags.size());
  for (const std::string& name : trace.tags) tags.push_back(name.empty() ? kUntagged : intern_tag(name));

  LiveBlocks live(allocator, trace.slots);
  const Stats before = allocator.stats();
  Stats at_steady = before;
  bool steady_reached = false;

  std::uint64_t in_use = before.in_use_bytes;
  std::uint64_t reserved = before.reserved_bytes;
  if (options.timeline != nullptr) options.timeline->begin(in_use, reserved, before.limit_bytes);
  const std::size_t progress_every = std::max<std::size_t>(1, options.progress_every);
  // Where the program would call plimsoll::step(): as step 1 begins, then as each step ends and the next begins.
  const std::vector<bool> boundary =
      options.mark_steps ? step_boundaries(trace) : std::vector<bool>(trace.events.size() + 1, false);

  // Where each step's map/unmap count starts: the event before which the boundary opening it is called (steps[0]
  // begins at its first event, step k + 1 where step k ends), and, last, where the last step ends.
  std::vector<std::size_t> step_cuts;
  for (std::size_t k = 0; k < trace.steps.size(); ++k) {
    step_cuts.push_back(k == 0 ? trace.steps[0].begin : trace.steps[k - 1].end);
  }
  if (!trace.steps.empty()) step_cuts.push_back(trace.steps.back().end);
  std::vector<std::uint64_t> maps_at_cut;
  std::vector<std::uint64_t> unmaps_at_cut;
  const auto cut_step = [&] {
    const Stats now = allocator.stats();
    maps_at_cut.push_back(now.maps);
    unmaps_at_cut.push_back(now.unmaps);
  };

  const auto started = std::chrono::steady_clock::now();
  for (std::size_t index = 0; index < trace.events.size(); ++index) {
    if (options.progress && index % progress_every == 0 && index > 0) options.progress(index);
    const TraceEvent& event = trace.events[index];
    while (maps_at_cut.size() < step_cuts.size() && step_cuts[maps_at_cut.size()] == index) cut_step();
    if (boundary[index]) allocator.step();
    const bool changes_live = event.kind == TraceEvent::Kind::allocate || event.kind == TraceEvent::Kind::free;
    if (changes_live && event.slot >= trace.slots) {
      // Only a Trace built by hand can get here; parse_trace numbers slots itself.
      throw InvalidArgument(fmt::format("{}:{}: slot {} is outside the trace's {} slots; set Trace::slots to the "
                                        "number of allocations",
                                        trace.origin, event.line, event.slot, trace.slots));
    }
    if (event.kind == TraceEvent::Kind::allocate) {
      void* block = nullptr;
      try {
        const Tag tag = event.tag < tags.size() ? tags[event.tag] : kUntagged;
        block = allocator.allocate(static_cast<std::size_t>(event.bytes), tag);
      } catch (const OutOfMemory& oom) {
        result.oom = true;
        result.oom_event = index;
        result.oom_line = event.line;
        result.oom_message = oom.what();
        break;
      }
      live[event.slot] = block;
      if (touch) touch_pages(block, event.bytes);
      ++result.ops;
    } else if (event.kind == TraceEvent::Kind::free) {
      allocator.deallocate(live[event.slot]);
      live[event.slot] = nullptr;
      ++result.ops;
    }
    // map/unmap/oom events are what the recording device did; this replay makes its own.
    if (options.timeline != nullptr) {
      if (changes_live) {
        const MemoryUsage now = allocator.usage();
        in_use = now.in_use_bytes;
        reserved = now.reserved_bytes;
      }
      options.timeline->record(index, in_use, reserved);
    }
    if (index == steady_from) {
      at_steady = allocator.stats();
      steady_reached = true;
    }
  }
  const auto elapsed = std::chrono::steady_clock::now() - started;
  if (options.progress) options.progress(result.oom_event.value_or(trace.events.size()));
  // Read before the cleanup below: its unmaps are not the trace's.
  const Stats after = allocator.stats();
  // A step the replay entered but did not finish (an OOM) ends here; a trace whose last step ends with its last
  // event ends here too.
  const bool finished = !result.oom;
  if (!maps_at_cut.empty() && (maps_at_cut.size() < step_cuts.size()) &&
      (!finished || step_cuts[maps_at_cut.size()] >= trace.events.size())) {
    maps_at_cut.push_back(after.maps);
    unmaps_at_cut.push_back(after.unmaps);
  }
  for (std::size_t k = 0; k + 1 < maps_at_cut.size(); ++k) {
    result.maps_by_step.push_back(maps_at_cut[k + 1] - maps_at_cut[k]);
    result.unmaps_by_step.push_back(unmaps_at_cut[k + 1] - unmaps_at_cut[k]);
  }
  live.free_all();

  result.peak_in_use_bytes = after.peak_in_use_bytes;
  result.peak_reserved_bytes = after.peak_reserved_bytes;
  result.reserved_over_live = trace.peak_live_bytes == 0 ? 0.0
                                                         : static_cast<double>(after.peak_reserved_bytes) /
                                                               static_cast<double>(trace.peak_live_bytes);
  result.step_plan = after.step_plan;
  result.run_plan = after.run_plan;
  result.maps = after.maps - before.maps;
  result.unmaps = after.unmaps - before.unmaps;
  if (steady_reached) {
    result.steady_maps = after.maps - at_steady.maps;
    result.steady_unmaps = after.unmaps - at_steady.unmaps;
  }
  const auto nanoseconds = std::chrono::duration_cast<std::chrono::duration<double, std::nano>>(elapsed).count();
  result.ns_per_op = result.ops == 0 ? 0.0 : nanoseconds / static_cast<double>(result.ops);
  return result;
}

}  // namespace plimsoll::telemetry
