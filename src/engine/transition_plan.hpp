#pragma once
// Step-aware placement, part 1c: a transition plan, for the one step after a boundary whose steady plans are all
// over the limit (plan_candidates.hpp's best_plan found none that fits).
//
// Every steady plan is costed statically: its ranges and every live block's granules mapped at once, with the
// step's leftovers (gradients, optimizer state) still where best fit put them. That is exact for steady state
// (nothing is mapped or unmapped), but the step that first follows a plan may map and unmap (the target counts
// steady state only), so the check here is time-varying. The transition plan puts every request at the address an
// *ideal* steady plan gives it (the step packed around the older blocks alone, each leftover sharing one range with
// its previous copy) wherever nothing live is in the way over its lifetime, and packs the rest around the previous
// copies, which are obstacles until the tick they are freed. Followed with lazy mapping (a planned range is mapped
// when its request comes and kept, since the next steps use it; cached granules that no entry born so far covers
// are given back to make room: PlanFollower::follow_transition), what it needs mapped at tick t is
//     granules(obstacles live at t)  UNION  granules(entries born at or before t)
// and transition_peak_granules is the most of that over the step. It is not a bound on what is mapped: cached
// granules (freed memory) stay mapped until a planned range needs room, and are given back only then, under the
// limit as ever. It is followed when that peak and the ideal
// plan's static cost once the leftovers are where it wants them (the older blocks' granules UNION its entries')
// are both within the limit; the next boundary maps the ideal plan whole and follows it.
// Safety does not rest on it: the heap places a request at its planned address only inside a free block and maps
// only under the limit (Heap::allocate_at, Heap::map_ranges), and the follower falls back to best fit otherwise.
#include <cstdint>
#include <vector>

#include "engine/granule_map.hpp"
#include "engine/plan_candidates.hpp"
#include "engine/step_plan.hpp"

namespace plimsoll::engine {

/// Mapped granules, tick by tick, of a step that follows `plan` with lazy mapping: the most, over ticks
/// [0, step.ticks), of |granules of obstacles with until > t  UNION  granules of planned entries born <= t|.
/// Entries with addr 0 (growth) are not counted. O(ticks + granules the obstacles and entries cover).
std::uint64_t transition_peak_granules(const StepObservation& step, const std::vector<Obstacle>& obstacles,
                                       const StepPlan& plan, const GranuleMap& granules);

/// The transition plan and what it costs.
/// Invariants: `plan` satisfies StepPlan's invariants against `step` and the obstacles it was packed around (every
/// request, leftover or not, is pinned at its ideal address where no obstacle is live over any of its lifetime); `peak_granules`
/// is transition_peak_granules of it; `fits` is both peak_granules and ideal_granules x granule <= the heap's limit,
/// and every leftover (a request that outlives the step) at its ideal address (ideal_granules assumes it is).
struct TransitionPlan {
  StepPlan ideal;  // the steady plan the steps after the transition follow (leftovers where it pins them)
  StepPlan plan;  // empty when not worth following: growth requests (not handled), or an ideal plan over the limit
  std::uint64_t peak_granules = 0;
  std::uint64_t ideal_granules = 0;  // the ideal plan's static cost once its leftovers are in place
  bool fits = false;
};

/// `as_obstacles` is the step prepared with its leftovers as obstacles (StepObservation::leftovers_as_obstacles:
/// held_until set for paired leftovers), `obstacles` every live block with those leftovers until their ticks, and
/// `older` the live blocks without the leftovers (what stays where it is in steady state).
TransitionPlan pack_transition(const StepObservation& as_obstacles, const std::vector<Obstacle>& obstacles,
                               const std::vector<Obstacle>& older, const HeapSnapshot& heap,
                               std::uint64_t search_work = kSearchWork);

}  // namespace plimsoll::engine
