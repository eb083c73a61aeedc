#include "engine/plan_candidates.hpp"

#include <algorithm>
#include <tuple>

#include "engine/heap.hpp"
#include "engine/plan_search.hpp"

namespace plimsoll::engine {

// Measured on the shared traces at the target's limits (docs/engine.md, "Against the target"), each of these is
// the cheapest on some step: first fit by size (MobileNetV2), granule-aware by size around the leftovers as
// obstacles (GPT, ResNet-50: their second plans), granule-aware by size with leftovers pinned (VGG-16, ResNet-50's
// and the ResNet-18 traces' first plans), size x lifetime with leftovers pinned (ResNet-18 at batch 128). Greedy
// best fit by size, lifetime order, and plans in fresh address space above everything live (or confined to the
// granules live blocks cover) never were: the fresh ones mapped 300 to 1,300 more granules than the rest.
const std::array<PlanCandidate, kCandidates> kPlanCandidates{{
    {{PackOrder::size, false, false}, false, false},
    {{PackOrder::size, true, false}, true, false},
    {{PackOrder::size, true, false}, true, true},
    {{PackOrder::area, true, false}, false, true},
}};

namespace {

// Marks the granules that [addr, addr + size) covers.
void mark(std::vector<bool>& granules, const GranuleMap& map, std::uint64_t addr, std::uint64_t size) {
  for (std::uint64_t g = map.first_covering(addr); g < map.end_covering(addr, size); ++g) granules[g] = true;
}

}  // namespace

HeapSnapshot HeapSnapshot::of(const Heap& heap) {
  HeapSnapshot snapshot{heap.base(), heap.span_bytes(), heap.options().limit, heap.granules(), {}};
  snapshot.live_granules.assign(heap.span_bytes() / heap.granules().granule(), false);
  heap.walk([&](const BlockView& block) {
    if (!block.free && !block.small) mark(snapshot.live_granules, snapshot.granules, block.addr, block.size);
  });
  return snapshot;
}

PlanCost plan_cost(const StepPlan& plan, const Heap& heap) { return plan_cost(plan, HeapSnapshot::of(heap)); }

PlanCost plan_cost(const StepPlan& plan, const HeapSnapshot& heap) {
  const GranuleMap& map = heap.granules;
  std::vector<bool> used = heap.live_granules;
  for (const StepPlan::Entry& e : plan.entries)
    if (e.addr != 0) mark(used, map, e.addr, e.size);
  PlanCost cost;
  for (std::uint64_t g = 0; g < used.size(); ++g) {
    if (!used[g]) continue;
    ++cost.granules;
    if (!map.is_mapped(g)) ++cost.new_granules;
  }
  cost.fits = cost.granules * map.granule() <= heap.limit;
  return cost;
}

StepPlan best_plan(const PreparedStep& as_obstacles, const PreparedStep& pinned, const Heap& heap,
                   std::size_t* chosen) {
  return best_plan(as_obstacles, pinned, HeapSnapshot::of(heap), chosen);
}

StepPlan best_plan(const PreparedStep& as_obstacles, const PreparedStep& pinned, const HeapSnapshot& heap,
                   std::size_t* chosen) {
  const GranuleMap& map = heap.granules;
  std::vector<bool> live(heap.span / map.granule(), false);  // the granules live blocks cover
  for (const Obstacle& o : as_obstacles.obstacles) mark(live, map, o.addr, o.size);

  StepPlan best;
  PlanCost best_cost;
  std::size_t best_candidate = 0;
  // Fitting first; among those, the fewest granules to map now, then the fewest in all. Among plans that do not
  // fit, the fewest in all (the nearest miss). Ties: the earlier candidate.
  const auto better = [](const PlanCost& a, const PlanCost& b) {
    if (a.fits != b.fits) return a.fits;
    if (!a.fits) return a.granules < b.granules;
    return std::tie(a.new_granules, a.granules) < std::tie(b.new_granules, b.granules);
  };
  for (std::size_t c = 0; c < kCandidates; ++c) {
    const PlanCandidate& candidate = kPlanCandidates[c];
    const PreparedStep& prepared = candidate.pinned ? pinned : as_obstacles;
    PackOptions pack = candidate.pack;
    if (candidate.granule_aware) {
      pack.granule = map.granule();
      pack.paid = &live;
    }
    StepPlan plan = pack_step(prepared.step, prepared.obstacles, heap.base, heap.span, pack);
    if (plan.entries.empty()) continue;  // not in the address space
    const PlanCost cost = plan_cost(plan, heap);
    if (best.entries.empty() || better(cost, best_cost)) {
      best = std::move(plan);
      best_cost = cost;
      best_candidate = c;
      if (chosen != nullptr) *chosen = c;
    }
    // A plan that fits and maps nothing new costs no map call: the rest could only save granules already mapped,
    // for another O(requests^2) each under the lock.
    if (best_cost.fits && best_cost.new_granules == 0) return best;
  }
  // The search runs only for a plan that does not fit, and only when one could (below): it may make it fit. A plan
  // that fits keeps the greedy layout: measured, searching those too saved a granule or a map call at two
  // boundaries of the batch-keeping ResNet-18 trace at peak live + 4 MiB, whose later steps then ran out of memory
  // 18,918 events sooner (docs/engine.md).
  if (best.entries.empty() || best_cost.fits || kSearchWork == 0) return best;
  // From the cheapest greedy plan, with the live blocks' granules paid for: it lowers the granules the entries add
  // to them (plan_cost's count), then the footprint. Kept only when plan_cost says it is better.
  const PlanCandidate& start = kPlanCandidates[best_candidate];
  const PreparedStep& prepared = start.pinned ? pinned : as_obstacles;
  // No plan of this preparation covers fewer granules than the bytes it holds at its busiest tick (obstacles
  // included) fill: when those are over the limit, no search can make it fit, so none is run. At the target's
  // limits this skips every unfit boundary of the shared traces but GPT's and ResNet-50's second (docs/engine.md).
  const std::uint64_t load = step_max_load(prepared.step, prepared.obstacles);
  if ((load + map.granule() - 1) / map.granule() * map.granule() > heap.limit) return best;
  StepPlan searched = improve_plan(prepared.step, prepared.obstacles, heap.base, heap.span, best,
                                   {.budget = kSearchWork, .granule = map.granule(), .paid = &live});
  const PlanCost searched_cost = plan_cost(searched, heap);
  if (better(searched_cost, best_cost)) {
    best = std::move(searched);
    if (chosen != nullptr) *chosen = kCandidates;
  }
  return best;
}

}  // namespace plimsoll::engine
