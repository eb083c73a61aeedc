#pragma once
// Step-aware placement, part 1b: a few packings of one observed step, and the choice among them by what they cost
// in memory that must be mapped (PlanFollower::build_plan calls it at a step boundary).
//
// A plan's physical cost is not its address span but the granules it maps: the granules of the blocks that stay
// live (mapped anyway) united with the granules its entries cover. No single packing wins on every workload, so a
// few are tried (kPlanCandidates) and the one kept fits the limit and maps the fewest granules not mapped already
// (each is a map call at the boundary, and at the limit an unmap too), then the fewest in all.
// Safety does not rest on the choice: every candidate is a valid plan (StepPlan's invariants), and the follower
// places a request at its planned address only inside a free block.
//
// Cost: each candidate is one pack_step, O(requests^2); kCandidates of them run at the boundary (bounded by
// PlanFollower::kMaxStepRequests), then, when none fits, the search (kSearchWork units at most), all off the device's
// lock: they read a HeapSnapshot, never the heap itself.
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/granule_map.hpp"
#include "engine/step_plan.hpp"

namespace plimsoll::engine {

class Heap;

struct PlanCandidate {
  PackOptions pack;
  bool granule_aware = false;  // PackOptions::granule: the heap's granule, the live blocks' granules paid for
  bool pinned = false;         // leftovers pinned where they are (PreparedStep `pinned`), not obstacles until a tick
};
inline constexpr std::size_t kCandidates = 4;
/// The search's budget (plan_search.hpp, in work units) when no greedy candidate fits (docs/engine.md, "Search").
inline constexpr std::uint64_t kSearchWork = 8'000'000;
extern const std::array<PlanCandidate, kCandidates> kPlanCandidates;

/// What the packer and plan_cost read of the heap, copied under the device's lock so packing can run without it.
struct HeapSnapshot {
  std::uint64_t base = 0, span = 0, limit = 0;
  GranuleMap granules;              // which granules were mapped
  std::vector<bool> live_granules;  // granules covered by live blocks (small pages whole)
  static HeapSnapshot of(const Heap& heap);
};

/// What a plan would cost on this heap, in granules.
struct PlanCost {
  std::uint64_t granules = 0;      // live blocks' granules united with the entries'
  std::uint64_t new_granules = 0;  // of those, not mapped now
  bool fits = false;               // granules x granule size within the heap's limit
};
PlanCost plan_cost(const StepPlan& plan, const HeapSnapshot& heap);
PlanCost plan_cost(const StepPlan& plan, const Heap& heap);

/// One observed step as the packer takes it, with the live blocks it must keep clear of.
struct PreparedStep {
  const StepObservation& step;
  const std::vector<Obstacle>& obstacles;
};

/// The cheapest plan among kPlanCandidates that fits the heap's limit, or, when none fits, the one that maps the
/// fewest granules in all (the caller then finds it unfit). Empty only when no candidate fits the address space.
/// The two preparations of the step (StepObservation::leftovers_as_obstacles and pair_leftovers) have the same
/// requests in the same order; `as_obstacles.obstacles` must hold every live block. Stops at the first candidate
/// that fits and maps nothing new (no later one could save a map call). When none fits, improves the nearest miss
/// with the bounded search (improve_plan, kSearchWork) and keeps the result when it is cheaper. `chosen`, when not null, gets
/// the index of the candidate kept, or kCandidates when the search improved it.
StepPlan best_plan(const PreparedStep& as_obstacles, const PreparedStep& pinned, const HeapSnapshot& heap,
                   std::size_t* chosen = nullptr);
StepPlan best_plan(const PreparedStep& as_obstacles, const PreparedStep& pinned, const Heap& heap,
                   std::size_t* chosen = nullptr);

}  // namespace plimsoll::engine
