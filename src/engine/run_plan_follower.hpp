#pragma once
// Following a run plan (run_plan.hpp): request i of the device, counted from its first allocation, goes to
// Heap::allocate_at(base + entries[i].offset) while it matches the plan; the first that does not ends the plan for
// good, and that request and every later one take the device's normal path (best fit, step plans from the next
// step boundary: docs/engine.md, "Run plans").
//
// Invariants of a RunPlanFollower:
//  - next_ is the index of the next request: it counts every request the device made while the plan was active, so
//    next_ == stats_.placed until the plan ends (a request is either placed or ends the plan), and
//    stats_.ended_at == next_ once it has;
//  - once stats_.ended_by != none it never changes again and allocate() is not called (the device routes to its
//    normal path): a plan ends for good, never resumes;
//  - a request is placed only inside one free block of the heap (Heap::allocate_at), so a wrong or stale plan costs
//    memory, never correctness; the heap maps exactly the granules the placed block covers (no growth ahead: the
//    plan's granules are its budget, counted against the same limit as every mapping); when those are over the
//    limit, cached granules (no live block in them) are given back first, as few as make room (Heap::map_ranges);
//  - while active, every request of the device comes here, the small ones (<= 1 MiB) included: the plan packs them
//    inside large blocks, never in small pages (bench/run_bound.hpp's model), so the device's per-thread caches,
//    its step plans' placement and its stream reuse all step aside until it ends (allocator.cpp); a planned range
//    held only by blocks parked on the request's own stream is taken from them (StreamOrder::unpark_range), and a
//    byte it freed early is placed at once or the device synchronized before anyone else can take it.
// Not thread-safe: plimsoll::Allocator holds the device lock for every call.
#include <cstdint>
#include <string>

#include "engine/heap.hpp"
#include "engine/run_plan.hpp"
#include "engine/stream_order.hpp"
#include "plimsoll/stats.hpp"

namespace plimsoll {
class Allocator;
}

namespace plimsoll::engine {

/// Why `plan` cannot be followed on `heap` at all (its granule or its limit is not the device's, or it has no
/// entries), as a sentence naming the plan's source and the fix; empty when it can. `device` names the device.
std::string run_plan_mismatch(const RunPlan& plan, const Heap& heap, const std::string& device);

class RunPlanFollower {
 public:
  /// `plan` must have passed run_plan_mismatch for `heap`.
  RunPlanFollower(Heap& heap, RunPlan plan);

  /// Maps every granule the plan's entries cover, now (before the device's first allocation), when they fit the
  /// limit together: the plan's granules are its budget, and mapped up front the run makes no map while the plan
  /// places its requests (none after step 0: the target's rule). A plan covering more than the limit (one packed
  /// to fit only with unmaps) maps lazily, each request's granules as it comes. Returns the bytes mapped.
  std::uint64_t map_ahead();

  /// The request placed at its planned address, or, at the first mismatch, the plan ended (stats().ended_by) and
  /// 0 with `*ended` set: the caller then takes its normal path for this request and every later one. Also 0
  /// (with *ended false) only when the heap is paused, a refusal the caller reports as for any request.
  /// `streams`: the device's stream order, when it has one, and `stream` the request's: a planned range held only
  /// by blocks parked on that same stream is taken from them (StreamOrder::unpark_range) rather than ending the plan.
  std::uint64_t allocate(std::uint64_t bytes, std::uint16_t tag, bool* ended, StreamOrder* streams = nullptr,
                         StreamHandle stream = nullptr);
  /// At a step boundary: when every entry was placed (the end of the plan's last step), the plan ends as
  /// `finished`, so that the step plans take over at this boundary. True when the plan is (now) ended.
  bool at_boundary();
  /// Ends the plan for good with `why` (a caller that can no longer route requests here).
  void end(RunPlanStats::End why);

  bool active() const { return stats_.ended_by == RunPlanStats::End::none; }
  const RunPlanStats& stats() const { return stats_; }
  const RunPlan& plan() const { return plan_; }

 private:
  /// Heap::allocate_at(addr), giving back cached granules when the range is over the limit (the plan's request
  /// being placed, for stats_.made_room); 0 with heap_.last_failure() saying why.
  std::uint64_t place(std::uint64_t addr, std::uint64_t bytes, std::uint16_t tag, std::uint64_t hint);

  Heap& heap_;
  RunPlan plan_;
  std::uint64_t next_ = 0;  // the next request's index (invariants above)
  std::uint64_t last_ = 0;  // the last block placed (0: none): a hint for the next placement's search
  RunPlanStats stats_;
};

}  // namespace plimsoll::engine

namespace plimsoll {

/// Installs a run plan on an allocator: Allocator::set_run_plan's work with the plan in memory (tests, and shells
/// that hold a plan already). Returns why it was ignored (engine::run_plan_mismatch), empty when it will be
/// followed; throws InvalidState after the device's first allocation, naming the fix.
struct RunPlanLoader {
  static std::string install(Allocator& allocator, engine::RunPlan plan);
};

}  // namespace plimsoll
