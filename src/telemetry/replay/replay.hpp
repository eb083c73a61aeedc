#pragma once
// Replays an allocation trace against a device, for what a policy costs on a real workload: peaks of memory
// in use and reserved against the live bytes the program asked for, map/unmap traffic, and where it ran out.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "plimsoll/allocator.hpp"
#include "plimsoll/stats.hpp"
#include "plimsoll/trace.hpp"
#include "telemetry/replay/timeline.hpp"

namespace plimsoll::telemetry {

struct ReplayOptions {
  /// Write one byte per 4 KiB page of each new block when the device's memory is host memory, so the replay
  /// pays real first-touch (page fault) costs. Ignored on devices whose memory this process cannot touch.
  bool touch_memory = false;
  /// When set, sees the device's in-use and reserved bytes after every event: an Allocator::usage() read (two
  /// counters under the lock) per allocation and free, plus the recorder's own work, so ns/op grows
  /// (docs/timelines.md has the cost).
  TimelineRecorder* timeline = nullptr;
  /// When set, called with the number of events done every `progress_every` events and once at the end.
  std::function<void(std::size_t events_done)> progress{};
  std::size_t progress_every = std::size_t{1} << 16;
  /// Call Allocator::step() where the trace's steps meet, as plimsoll::step() would in the recorded program:
  /// before the first step and at the end of every step but the last. Step-aware placement learns from them.
  bool mark_steps = true;
};

struct ReplayResult {
  std::string trace;   // the trace's origin
  std::string device;  // the allocator's device name
  std::string policy;  // its growth policy
  std::size_t steps = 0;            // the trace's steps, and where they came from ("markers", "detected", "none")
  std::string steps_from = "none";
  std::uint64_t peak_live_bytes = 0;      // of the trace: the most bytes the program had live at once
  std::uint64_t peak_in_use_bytes = 0;    // the device's peak of rounded live bytes
  std::uint64_t peak_reserved_bytes = 0;  // the device's peak of mapped bytes
  double reserved_over_live = 0;          // peak reserved / peak live: the policy's overhead (0 when nothing live)
  std::uint64_t maps = 0;                 // backing map/unmap calls during the replay
  std::uint64_t unmaps = 0;
  // Map/unmap calls after the end of the first training step (Trace::steps[0], from its "# step N end" marker or
  // detected): the steady-state traffic once caches are warm. Zero for a trace without steps.
  std::uint64_t steady_maps = 0;
  std::uint64_t steady_unmaps = 0;
  // Map/unmap calls per training step, [k] for Trace::steps[k]: from the boundary that opens the step (the plan
  // mapped there included) to the one that opens the next; the last step ends at its end. Only the steps the
  // replay reached (an OOM cuts the list short); empty for a trace without steps.
  std::vector<std::uint64_t> maps_by_step;
  std::vector<std::uint64_t> unmaps_by_step;
  // Step-aware placement over the replay (Allocator::step; all zero when the device did not use it).
  StepPlanStats step_plan;
  // The run plan over the replay (Allocator::set_run_plan; loaded false when the device had none).
  RunPlanStats run_plan;
  bool oom = false;
  std::optional<std::size_t> oom_event;  // index into Trace::events of the allocation that failed
  std::uint32_t oom_line = 0;            // its line in the trace file
  std::string oom_message;               // the OutOfMemory report
  std::size_t ops = 0;                   // allocations and frees done (the failed allocation not counted)
  double ns_per_op = 0;
};

/// Runs the trace once, in order, through `allocator`. Stops at the first OutOfMemory (recorded in the result),
/// and always frees whatever is still live, so the allocator ends as empty as it started. Peaks are the
/// allocator's own (Stats), so pass a fresh allocator for peaks that belong to this trace alone.
ReplayResult replay(const Trace& trace, Allocator& allocator, const ReplayOptions& options = {});

}  // namespace plimsoll::telemetry
