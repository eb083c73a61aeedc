#include "engine/plan_follower.hpp"

#include <algorithm>
#include <unordered_set>
#include <vector>

#include "engine/plan_candidates.hpp"

namespace plimsoll::engine {

std::uint64_t PlanFollower::allocate(std::uint64_t bytes, std::uint16_t tag) {
  if (heap_.paused()) [[unlikely]] return heap_.allocate(bytes, tag);  // refused (HeapFailure::paused), not a fallback
  if (plan_.entries.empty()) {
    const std::uint64_t addr = heap_.allocate(bytes, tag);
    if (observing_ && addr != 0) {
      ++stats_.learning;
      observe(addr, Heap::round(bytes));
    }
    return addr;
  }
  const std::uint64_t size = Heap::round(bytes);
  const std::size_t end = std::min(plan_.entries.size(), cursor_ + kLookahead);
  if (cursor_ >= plan_.entries.size()) return fall_back(bytes, tag, &StepPlanStats::past_plan);
  std::size_t match = cursor_;
  while (match < end && plan_.entries[match].size != size) ++match;
  if (match == end) return fall_back(bytes, tag, &StepPlanStats::not_in_plan);
  stats_.skipped += match - cursor_;
  cursor_ = match + 1;
  std::uint64_t hint = 0;
  for (const std::uint32_t j : plan_.below[match]) {
    if (j == UINT32_MAX) break;
    if (heap_.find_live(plan_.entries[j].addr)) {
      hint = plan_.entries[j].addr;
      break;
    }
  }
  if (const std::uint64_t addr = heap_.allocate_at(plan_.entries[match].addr, bytes, tag, hint); addr != 0) {
    ++stats_.followed;
    observe(addr, size);
    return addr;
  }
  return fall_back(bytes, tag,
                   heap_.last_failure() == HeapFailure::occupied ? &StepPlanStats::occupied : &StepPlanStats::over_limit);
}

std::uint64_t PlanFollower::fall_back(std::uint64_t bytes, std::uint16_t tag, std::uint64_t StepPlanStats::*reason) {
  ++(stats_.*reason);
  ++step_fallbacks_;
  const std::uint64_t addr = heap_.allocate(bytes, tag);
  if (addr != 0) observe(addr, Heap::round(bytes));
  return addr;
}

void PlanFollower::observe(std::uint64_t addr, std::uint64_t size) {
  if (!observing_) return;
  if (observation_.requests.size() >= kMaxStepRequests) {  // not a training step: stop watching until the next
    observation_.clear();
    observing_ = false;
    return;
  }
  observation_.allocated(addr, size);
}

void PlanFollower::step_boundary() {
  ++stats_.steps;
  if (!observing_) {  // the first boundary (what came before, model building, is not a step), or a step too long
    observing_ = true;
    observation_.clear();
    cursor_ = 0;
    return;
  }
  const bool fell_back = step_fallbacks_ > 0;
  const bool pack = plan_.entries.empty() || (fell_back && (first_plan_ || previous_step_fell_back_));
  if (pack && !observation_.requests.empty() && stats_.steps >= next_try_) {
    first_plan_ = stats_.plans + stats_.unfit == 0;
    build_plan();
  }
  previous_step_fell_back_ = fell_back;
  step_fallbacks_ = 0;
  cursor_ = 0;
  observation_.clear();
}

void PlanFollower::build_plan() {
  // Memory that was live before the observed step began and still is stays where it is, for the whole step.
  std::vector<Obstacle> obstacles;
  std::unordered_set<std::uint64_t> in_pages;  // leftovers inside small pages: the plan cannot reuse their place
  heap_.walk([&](const BlockView& block) {
    if (block.free) return;
    if (block.small) {
      in_pages.insert(block.addr);
      return;
    }
    if (!block.page && observation_.live.count(block.addr) != 0) return;
    obstacles.push_back(Obstacle{block.addr, block.size});
  });
  // Two ways to carry the step's leftovers into the plan (plan_candidates.hpp tries both). Pinned: each stays
  // where it is, and its next copy shares its range (StepObservation::pair_leftovers); those in small pages are
  // packed like any request instead, their page being an obstacle.
  StepObservation pinned = observation_;
  pinned.pair_leftovers();
  for (StepObservation::Request& request : pinned.requests) {
    if (request.pinned != 0 && in_pages.count(request.pinned) != 0) {
      request.pinned = 0;
      request.held_until = 0;
    }
  }
  const std::vector<Obstacle> around_pinned = obstacles;
  // As obstacles: each stays where it is until its pair's free (StepObservation::leftovers_as_obstacles); those in
  // small pages are covered by their page.
  for (const Obstacle& o : observation_.leftovers_as_obstacles())
    if (in_pages.count(o.addr) == 0) obstacles.push_back(o);
  StepPlan plan = best_plan({observation_, obstacles}, {pinned, around_pinned}, heap_);
  if (plan.entries.empty()) return;  // does not fit the address space: keep what there was
  // Mapped once, here. A plan whose ranges cannot all be mapped under the limit is not followed: half a plan
  // would scatter planned blocks through the space best fit needs for the rest. The next step runs best fit,
  // is observed, and is packed again (with its leftovers paired, the next plan is usually smaller).
  if (!heap_.map_ranges(covered_ranges(plan))) {
    ++stats_.unfit;
    plan_ = StepPlan{};
    // Packing costs O(requests^2) at the boundary: after plans that did not fit, try again after 1, 3, 7, ...
    // boundaries rather than at every one.
    next_try_ = stats_.steps + (std::uint64_t{1} << std::min<std::uint64_t>(stats_.unfit, 10)) - 1;
    return;
  }
  plan_ = std::move(plan);
  ++stats_.plans;
  stats_.plan_bytes = plan_.footprint == 0 ? 0 : [&] {
    std::uint64_t lo = UINT64_MAX;
    for (const StepPlan::Entry& e : plan_.entries) lo = std::min(lo, e.addr);
    return heap_.base() + plan_.footprint - lo;
  }();
  stats_.plan_peak_bytes = plan_.peak_live;
}

}  // namespace plimsoll::engine
