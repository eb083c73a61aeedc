#include "engine/transition_plan.hpp"

#include "engine/plan_search.hpp"

#include <algorithm>
#include <array>
#include <utility>

namespace plimsoll::engine {

std::uint64_t transition_peak_granules(const StepObservation& step, const std::vector<Obstacle>& obstacles,
                                       const StepPlan& plan, const GranuleMap& granules) {
  // Per granule: how many live obstacles cover it, and whether an entry born so far does. A granule counts while
  // either holds. Changes happen at ticks: an obstacle leaves at its `until`, an entry arrives at its birth.
  std::vector<std::uint32_t> obstacles_on;
  std::vector<char> entry_on;
  const auto grow = [&](std::uint64_t end) {
    if (end > obstacles_on.size()) {
      obstacles_on.resize(end, 0);
      entry_on.resize(end, 0);
    }
  };
  std::uint64_t mapped = 0;
  std::vector<std::pair<std::uint32_t, const Obstacle*>> leaving;  // (tick, obstacle)
  for (const Obstacle& o : obstacles) {
    if (o.until == 0 || o.size == 0) continue;
    const std::uint64_t first = granules.first_covering(o.addr), end = granules.end_covering(o.addr, o.size);
    grow(end);
    for (std::uint64_t g = first; g < end; ++g)
      if (obstacles_on[g]++ == 0 && entry_on[g] == 0) ++mapped;
    if (o.until < step.ticks) leaving.emplace_back(o.until, &o);
  }
  std::sort(leaving.begin(), leaving.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::uint64_t peak = mapped;
  std::size_t next_leaving = 0;
  const auto leave_until = [&](std::uint32_t tick) {  // obstacles whose until <= tick are gone at tick
    for (; next_leaving < leaving.size() && leaving[next_leaving].first <= tick; ++next_leaving) {
      const Obstacle& o = *leaving[next_leaving].second;
      for (std::uint64_t g = granules.first_covering(o.addr); g < granules.end_covering(o.addr, o.size); ++g)
        if (--obstacles_on[g] == 0 && entry_on[g] == 0) --mapped;
    }
  };
  // Requests are in birth order; between two births only obstacles leave, which lowers the count, so the peak is
  // reached at a birth (or at tick 0).
  for (std::size_t i = 0; i < step.requests.size() && i < plan.entries.size(); ++i) {
    const StepPlan::Entry& entry = plan.entries[i];
    leave_until(step.requests[i].born);
    if (entry.addr == 0) continue;
    const std::uint64_t first = granules.first_covering(entry.addr), end = granules.end_covering(entry.addr, entry.size);
    grow(end);
    for (std::uint64_t g = first; g < end; ++g) {
      if (entry_on[g] != 0) continue;
      entry_on[g] = 1;
      if (obstacles_on[g] == 0) ++mapped;
    }
    peak = std::max(peak, mapped);
  }
  return peak;
}

namespace {

std::vector<bool> granules_of(const std::vector<Obstacle>& obstacles, const HeapSnapshot& heap) {
  std::vector<bool> paid(heap.span / heap.granules.granule(), false);
  for (const Obstacle& o : obstacles)
    for (std::uint64_t g = heap.granules.first_covering(o.addr);
         g < heap.granules.end_covering(o.addr, o.size) && g < paid.size(); ++g)
      paid[g] = true;
  return paid;
}

bool meets_obstacle(const StepObservation::Request& request, std::uint64_t addr,
                    const std::vector<Obstacle>& obstacles) {
  for (const Obstacle& o : obstacles)
    if (o.until > request.born && o.addr < addr + request.size && addr < o.addr + o.size) return true;
  return false;
}

}  // namespace

static std::uint64_t steady_granules(const StepPlan& plan, std::vector<bool> paid, const GranuleMap& granules) {
  for (const StepPlan::Entry& e : plan.entries)
    if (e.addr != 0)
      for (std::uint64_t g = granules.first_covering(e.addr); g < granules.end_covering(e.addr, e.size) && g < paid.size(); ++g)
        paid[g] = true;
  return static_cast<std::uint64_t>(std::count(paid.begin(), paid.end(), true));
}

TransitionPlan pack_transition(const StepObservation& as_obstacles, const std::vector<Obstacle>& obstacles,
                               const std::vector<Obstacle>& older, const HeapSnapshot& heap,
                               std::uint64_t search_work) {
  TransitionPlan result;
  for (const StepObservation::Request& request : as_obstacles.requests)
    if (request.growth) return result;
  const std::uint64_t granule = heap.granules.granule();
  // The ideal steady plan: each leftover shares one range with its previous copy (held_until), around the older
  // blocks alone, with their granules paid for: the cheapest of three packings (granule-aware by size, first fit
  // by size, granule-aware by size x lifetime: with the first alone, ResNet-50 at 1,496 granules missed its
  // transition by one), then the search when it is over the limit. No plan of the step around the older blocks
  // fits when the most bytes it holds at once fill more granules than the limit: then none is packed
  // (step_max_load, as best_plan checks before its search).
  const std::uint64_t load = step_max_load(as_obstacles, older);
  if ((load + granule - 1) / granule * granule > heap.limit) return result;
  const std::vector<bool> older_paid = granules_of(older, heap);
  const std::array<PackOptions, 3> rules{{{PackOrder::size, true, false, granule, &older_paid},
                                          {PackOrder::size, false, false},
                                          {PackOrder::area, true, false, granule, &older_paid}}};
  for (const PackOptions& rule : rules) {
    StepPlan plan = pack_step(as_obstacles, older, heap.base, heap.span, rule);
    if (plan.entries.empty()) continue;
    const std::uint64_t cost = steady_granules(plan, older_paid, heap.granules);
    if (result.ideal.entries.empty() || cost < result.ideal_granules) {
      result.ideal = std::move(plan);
      result.ideal_granules = cost;
    }
    if (result.ideal_granules * granule <= heap.limit) break;
  }
  if (result.ideal.entries.empty()) return result;
  if (result.ideal_granules * granule > heap.limit && search_work > 0) {
    StepPlan searched = improve_plan(as_obstacles, older, heap.base, heap.span, result.ideal,
                                     {.budget = search_work, .granule = granule, .paid = &older_paid});
    const std::uint64_t cost = steady_granules(searched, older_paid, heap.granules);
    if (cost < result.ideal_granules) {
      result.ideal = std::move(searched);
      result.ideal_granules = cost;
    }
  }
  // Not worth a transition: the plan it leads to would be unfit too.
  if (result.ideal_granules * granule > heap.limit) return result;
  // The transition: every request at its ideal address where nothing live is in the way over its lifetime (the
  // previous copies of the leftovers are obstacles until their ticks, not sharing a range with the next copies);
  // the rest packed around those and the obstacles.
  StepObservation transition = as_obstacles;
  for (std::size_t i = 0; i < transition.requests.size(); ++i) {
    StepObservation::Request& request = transition.requests[i];
    request.held_until = 0;
    if (!meets_obstacle(request, result.ideal.entries[i].addr, obstacles)) request.pinned = result.ideal.entries[i].addr;
  }
  const std::vector<bool> paid = granules_of(obstacles, heap);
  result.plan = pack_step(transition, obstacles, heap.base, heap.span, {PackOrder::size, true, false, granule, &paid});
  if (result.plan.entries.empty()) return result;
  result.peak_granules = transition_peak_granules(transition, obstacles, result.plan, heap.granules);
  // ideal_granules costs the ideal plan with every leftover's new copy at its ideal address; one that an obstacle
  // kept elsewhere would stay live there through the next boundary, and the ideal plan's cost would not hold.
  bool leftovers_in_place = true;
  for (std::size_t i = 0; i < transition.requests.size(); ++i)
    if (transition.requests[i].died == StepObservation::kOutlives &&
        result.plan.entries[i].addr != result.ideal.entries[i].addr)
      leftovers_in_place = false;
  result.fits = leftovers_in_place && result.peak_granules * granule <= heap.limit &&
                result.ideal_granules * granule <= heap.limit;
  return result;
}

}  // namespace plimsoll::engine
