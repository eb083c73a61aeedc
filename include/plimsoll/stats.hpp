#pragma once
// Counters a device keeps. Cheap to read: a copy taken under the device's lock.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace plimsoll {

struct TagStats {
  std::string tag;
  std::uint64_t in_use_bytes = 0;
  std::uint64_t peak_in_use_bytes = 0;
  std::uint64_t allocations = 0;  // live allocations
};

struct MemoryUsage {
  std::uint64_t in_use_bytes = 0;    // as Stats::in_use_bytes
  std::uint64_t reserved_bytes = 0;  // as Stats::reserved_bytes
};

/// Step-aware placement (docs/engine.md, "Step-aware placement"): after the first training step the device lays
/// the next steps out from a plan and places each request that matches it at its planned address.
struct StepPlanStats {
  std::uint64_t steps = 0;        // step boundaries the device saw (Allocator::step)
  std::uint64_t plans = 0;        // plans followed (the first after one observed step; again when steps change)
  std::uint64_t unfit = 0;        // plans packed but not followed: their ranges could not be mapped under the limit
  std::uint64_t stale = 0;        // plans packed but not followed: the device allocated or freed while packing
  std::uint64_t learning = 0;     // requests of an observed step while no plan was active: best fit
  std::uint64_t followed = 0;     // requests placed at their planned address
  std::uint64_t growth = 0;       // matched requests the plan leaves to best fit: kept without an older copy freed
  // Requests that fell back to best fit, and why:
  std::uint64_t not_in_plan = 0;  // size and order match no planned request (an extra tensor, another shape)
  std::uint64_t occupied = 0;     // matched, but a block was still live in the planned range
  std::uint64_t over_limit = 0;   // matched, but the range's granules could not be mapped under the limit
  std::uint64_t past_plan = 0;    // the step asked for more requests than the plan has
  std::uint64_t skipped = 0;      // planned requests a step did not make (the follower resynchronised past them)
  std::uint64_t plan_bytes = 0;   // the current plan's footprint: address span from its lowest to highest byte
  std::uint64_t plan_peak_bytes = 0;  // the live peak of the step it was packed from (its lower bound)
  // What packing cost: step boundaries that packed a plan (each O(requests^2), off the device's lock, in the
  // thread calling step()), and their time in all. Unfit plans are packed again at every boundary only while
  // they get cheaper (docs/engine.md, "What packing costs"), so on a job that never fits packs stay few.
  std::uint64_t packs = 0;
  std::uint64_t pack_ns = 0;
  // Transition steps: after a boundary whose plans were all over the limit, one step followed a transition plan
  // (mapping its ranges as its requests came) toward an ideal plan that fits (docs/engine.md, "Transition plans").
  // Counted in `plans` too, as the ideal plan after each.
  std::uint64_t transitions = 0;
  std::uint64_t transition_followed = 0;  // requests placed at their address in a transition plan (in `followed` too)
  std::uint64_t transition_maps = 0;      // map and unmap calls made during transition steps, in all
  std::uint64_t transition_unmaps = 0;
  std::uint64_t transitions_abandoned = 0;  // transition steps given up at their first fallback (best fit after)
  // Steps of a plan packed for emptying small pages given up at a fallback that says its premise is gone (best fit
  // after: PlanFollower::fall_back); their requests from then on count in none of the counters above.
  std::uint64_t steps_given_up = 0;
  std::uint64_t fallbacks() const { return not_in_plan + occupied + over_limit + past_plan; }
};

/// Run plans (docs/engine.md, "Run plans"): a plan packed offline from an earlier run of the same job places the
/// run's requests from its first allocation on (Allocator::set_run_plan), until the first request that does not
/// match it; from then on best fit and step plans, as on any device. All zero when the device has no run plan.
struct RunPlanStats {
  /// Why the run plan stopped placing requests (`none`: it is still active, or there was none).
  ///  - size: a request's rounded size is not the plan's (another job, batch or library version);
  ///  - fingerprint: the same, among the first 64 requests (RunPlan::kFingerprint): the plan is another job's;
  ///  - occupied: the planned range was not wholly free (a block best fit or the program placed there);
  ///  - limit: the planned range's granules could not be mapped under the device's limit, even after giving back
  ///    the cached granules (mapped, no live block in them) that the limit needed (made_room);
  ///  - finished: the plan's requests were all placed (the end of its last step, or one request past it);
  ///  - host_memory: the heap's own books could not grow for a planned request.
  enum class End { none, size, fingerprint, occupied, limit, finished, host_memory };
  bool loaded = false;           // a plan was loaded (set_run_plan) and followed from the first allocation
  std::uint64_t entries = 0;     // requests in the plan
  std::uint64_t placed = 0;      // requests placed at their planned address
  std::uint64_t made_room = 0;   // of those, placed after giving back cached granules the limit needed (unmaps)
  std::uint64_t unparked = 0;    // of those, placed in blocks freed on the request's stream, still parked (streams)
  std::uint64_t mapped_ahead = 0;  // bytes mapped when it was loaded: every granule it covers, when they fit the limit
  std::uint64_t ended_at = 0;    // the index of the request that ended it (its first unplaced one; entries when finished)
  End ended_by = End::none;
  bool active() const { return loaded && ended_by == End::none; }
};

/// "size", "occupied", ... ("none" while active or without a plan): for reports and logs.
std::string_view to_string(RunPlanStats::End end) noexcept;

struct Stats {
  std::uint64_t in_use_bytes = 0;        // rounded sizes of live allocations
  std::uint64_t requested_bytes = 0;     // sizes as asked for, of live allocations
  std::uint64_t peak_in_use_bytes = 0;
  std::uint64_t reserved_bytes = 0;      // backed by the device (mapped granules)
  std::uint64_t peak_reserved_bytes = 0;
  std::uint64_t largest_free_block = 0;  // largest request that fits in reserved memory right now
  std::uint64_t limit_bytes = 0;
  std::uint64_t allocations = 0;         // counts since creation
  std::uint64_t frees = 0;
  std::uint64_t ooms = 0;
  std::uint64_t maps = 0;                // map calls on the backing
  std::uint64_t unmaps = 0;
  std::uint64_t live_allocations = 0;
  // CUDA devices: blocks the program freed on a stream whose queued work may still use them, not counted in
  // in_use_bytes. Their stream may reuse them now, every other stream once the work completed.
  std::uint64_t parked_bytes = 0;
  // CUDA devices: device synchronizations at a free, in place of stream order: no event could be had, or the block
  // is one of the unrecorded_streams (a record_stream that ran out of host memory, noted in a fixed array ahead).
  std::uint64_t stream_fallbacks = 0;
  std::uint64_t unrecorded_streams = 0;
  // Address space the device's heap reserved up front (what `top` counts as VIRT for a host device): a span
  // larger than the limit, so the heap can grow in place. It costs no memory until mapped.
  std::uint64_t address_space_bytes = 0;
  // Host backings only (zero elsewhere): pages committed (mapped read/write, counted against the device's
  // capacity) and pages resident in RAM (touched). docs/engine.md, "Host memory", explains the three.
  std::uint64_t committed_bytes = 0;
  std::uint64_t resident_bytes = 0;
  std::vector<TagStats> tags;            // by current bytes, largest first
  StepPlanStats step_plan;
  RunPlanStats run_plan;
};

}  // namespace plimsoll
