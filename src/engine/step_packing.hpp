#pragma once
// Step-aware placement, the packer's geometry (internal to src/engine/): which addresses a request of an observed
// step may not use, and where in the rest it goes. pack_step (step_plan.cpp) places every request once with these;
// the search (plan_search.cpp) takes some out and places them again.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "engine/step_plan.hpp"

namespace plimsoll::engine::packing {

struct Interval {
  std::uint64_t addr, end;
};

/// [born, died) and, for a request that outlives the step, [0, held_until): whether two requests are ever live
/// at the same tick.
bool lifetimes_overlap(const StepObservation::Request& a, std::uint32_t a_died, const StepObservation::Request& b,
                       std::uint32_t b_died);

/// The addresses a request may not use: whole-step obstacles, the early obstacles it meets, and the placed requests
/// whose lifetimes overlap its own. Holds pointers into `obstacles`: keep them alive as long as the Packing.
struct Packing {
  const StepObservation& step;
  std::vector<Interval> fixed;         // obstacles for the whole step
  std::vector<const Obstacle*> early;  // obstacles until a tick
  std::vector<Interval> taken;         // scratch: what collect() found, sorted by address

  Packing(const StepObservation& observed, const std::vector<Obstacle>& obstacles);

  std::uint32_t died(std::size_t i) const {
    return step.requests[i].died == StepObservation::kOutlives ? step.ticks : step.requests[i].died;
  }
  /// Fills `taken` for request i against the requests in `others` (skipping i itself) at their plan addresses.
  template <class Others>
  void collect(std::uint32_t i, const StepPlan& plan, const Others& others) {
    const auto& request = step.requests[i];
    taken.assign(fixed.begin(), fixed.end());
    const std::uint32_t held = request.died == StepObservation::kOutlives ? request.held_until : 0;
    for (const Obstacle* o : early)
      if (request.born < o->until || held > 0) taken.push_back({o->addr, o->addr + o->size});
    for (const std::uint32_t j : others) {
      if (j != i && lifetimes_overlap(request, died(i), step.requests[j], died(j)))
        taken.push_back({plan.entries[j].addr, plan.entries[j].addr + plan.entries[j].size});
    }
    std::sort(taken.begin(), taken.end(), [](const Interval& a, const Interval& b) { return a.addr < b.addr; });
  }
  /// The lowest address at or above base where `size` bytes meet nothing taken (best_fit: the smallest gap that
  /// holds them instead, the open space above everything only when none does).
  std::uint64_t place(std::uint64_t size, std::uint64_t base, bool best_fit) const;
  /// Granule-aware: among the ends of the gaps that hold `size` bytes (and the open space above everything), the
  /// place that covers the fewest granules not `used` yet; ties go to the smaller gap, then the lower address.
  /// `used[g]`: whether granule g (counted from base) is paid for already.
  std::uint64_t place_in_granules(std::uint64_t size, std::uint64_t base, std::uint64_t granule,
                                  const std::vector<char>& used) const;
};

/// Footprint, search hints and the step's peak of a plan whose entries are all placed.
void finish_plan(const StepObservation& step, std::uint64_t base, StepPlan& plan);

}  // namespace plimsoll::engine::packing
