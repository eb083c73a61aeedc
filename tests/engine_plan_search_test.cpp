// The bounded search that improves a packed step (src/engine/plan_search.hpp): its plans are valid by an
// independent check (a sweep over the step's ticks, not the packer's own overlap rule), aligned, never worse than
// where it started, deterministic, within their budget; and on a step where every greedy order of pack_step is
// provably short of the optimum, it reaches it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "backings/sim_backing.hpp"
#include "engine/heap.hpp"
#include "engine/plan_candidates.hpp"
#include "engine/plan_search.hpp"
#include "engine/step_plan.hpp"

namespace plimsoll::engine {
namespace {

constexpr std::uint64_t KiB = 1ull << 10;
constexpr std::uint64_t MiB = 1ull << 20;
constexpr std::uint64_t kBase = 1ull << 30;

// At every tick of the step, the blocks live then (entries by their lifetimes, obstacles until their tick) are
// sorted by address and must not overlap. Independent of Packing::collect and lifetimes_overlap.
void expect_no_overlap_at_any_tick(const StepObservation& step, const StepPlan& plan,
                                   const std::vector<Obstacle>& obstacles) {
  ASSERT_EQ(plan.entries.size(), step.requests.size());
  struct Block {
    std::uint64_t addr, end;
    std::size_t who;  // entry index, or SIZE_MAX - obstacle index
  };
  for (std::uint32_t tick = 0; tick < step.ticks; ++tick) {
    std::vector<Block> live;
    for (std::size_t i = 0; i < step.requests.size(); ++i) {
      const StepObservation::Request& r = step.requests[i];
      if (r.growth) continue;
      const bool outlives = r.died == StepObservation::kOutlives;
      const bool alive = (tick >= r.born && (outlives || tick < r.died)) || (outlives && tick < r.held_until);
      if (alive) live.push_back({plan.entries[i].addr, plan.entries[i].addr + plan.entries[i].size, i});
    }
    for (std::size_t o = 0; o < obstacles.size(); ++o)
      if (tick < obstacles[o].until)
        live.push_back({obstacles[o].addr, obstacles[o].addr + obstacles[o].size, SIZE_MAX - o});
    std::sort(live.begin(), live.end(), [](const Block& a, const Block& b) { return a.addr < b.addr; });
    for (std::size_t k = 1; k < live.size(); ++k)
      ASSERT_LE(live[k - 1].end, live[k].addr)
          << "tick " << tick << ": blocks " << live[k - 1].who << " and " << live[k].who << " share bytes";
  }
}

void expect_aligned_in_span(const StepObservation& step, const StepPlan& plan, std::uint64_t span) {
  for (std::size_t i = 0; i < plan.entries.size(); ++i) {
    const StepObservation::Request& r = step.requests[i];
    ASSERT_EQ(plan.entries[i].size, r.size);
    if (r.growth) {
      ASSERT_EQ(plan.entries[i].addr, 0u) << "growth entry " << i << " got a place";
      continue;
    }
    ASSERT_EQ(plan.entries[i].addr % 256, 0u) << "entry " << i;
    ASSERT_GE(plan.entries[i].addr, kBase);
    ASSERT_LE(plan.entries[i].addr + r.size, kBase + span);
    if (r.pinned != 0) {
      ASSERT_EQ(plan.entries[i].addr, r.pinned) << "pinned entry " << i << " moved";
    }
  }
}

// A random step: sizes from 256 B to 6 MiB, random lifetimes, some blocks left live at its end (leftovers, paired
// with older frees of their size), a few growth requests.
StepObservation random_step(std::mt19937_64& random, int ops) {
  StepObservation step;
  std::vector<std::uint64_t> live;
  std::uint64_t next_addr = kBase + (1ull << 34);  // where the blocks lay when observed (pins point here)
  for (int op = 0; op < ops; ++op) {
    if (live.empty() || random() % 100 < 55) {
      const std::uint64_t size = Heap::round(random() % 3 == 0 ? random() % (6 * MiB) + 1 : random() % (64 * KiB) + 1);
      step.allocated(next_addr, size);
      live.push_back(next_addr);
      next_addr += 8 * MiB;
    } else {
      const std::size_t pick = random() % live.size();
      step.freed(live[pick], 0);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(pick));
    }
    if (random() % 40 == 0) step.freed(random() % 4096 * 256, Heap::round(random() % (6 * MiB) + 1));
  }
  return step;
}

std::uint64_t unpaid_granules(const StepPlan& plan, const std::vector<bool>& paid, std::uint64_t granule) {
  std::vector<bool> covered;
  for (const StepPlan::Entry& e : plan.entries) {
    if (e.addr == 0) continue;
    const std::uint64_t last = (e.addr + e.size - kBase + granule - 1) / granule;
    if (covered.size() < last) covered.resize(last, false);
    for (std::uint64_t g = (e.addr - kBase) / granule; g < last; ++g) covered[g] = true;
  }
  std::uint64_t count = 0;
  for (std::uint64_t g = 0; g < covered.size(); ++g) count += covered[g] && !(g < paid.size() && paid[g]);
  return count;
}

TEST(EnginePlanSearch, RandomStepsStayValidAlignedAndNoWorseThanTheStart) {
  constexpr std::uint64_t kSpan = 1ull << 36;
  constexpr std::uint64_t kGranule = 2 * MiB;
  std::vector<bool> paid(64, false);
  for (std::size_t g = 0; g < paid.size(); g += 5) paid[g] = true;
  for (std::uint64_t seed = 1; seed <= 24; ++seed) {
    std::mt19937_64 random(seed);
    StepObservation step = random_step(random, 260);
    std::vector<Obstacle> obstacles{{kBase + 3 * MiB, 2 * MiB}, {kBase + 17 * MiB, 512 * KiB, step.ticks / 2}};
    if (seed % 2 == 0) {
      for (const Obstacle& o : step.leftovers_as_obstacles()) obstacles.push_back(o);
    } else {
      step.pair_leftovers();  // leftovers pinned where they lie
    }
    if (seed % 3 == 0 && !step.requests.empty()) step.requests[step.requests.size() / 2].growth = true;
    const bool granules = seed % 4 < 2;
    PackOptions greedy{PackOrder::size, true, false};
    if (granules) {
      greedy.granule = kGranule;
      greedy.paid = &paid;
    }
    const StepPlan start = pack_step(step, obstacles, kBase, kSpan, greedy);
    ASSERT_FALSE(start.entries.empty());
    SearchOptions options{.budget = 3'000'000, .seed = seed};
    if (granules) {
      options.granule = kGranule;
      options.paid = &paid;
    }
    SearchReport report;
    const StepPlan searched = improve_plan(step, obstacles, kBase, kSpan, start, options, &report);
    ASSERT_NO_FATAL_FAILURE(expect_aligned_in_span(step, searched, kSpan)) << "seed " << seed;
    ASSERT_NO_FATAL_FAILURE(expect_no_overlap_at_any_tick(step, searched, obstacles)) << "seed " << seed;
    EXPECT_GT(report.moves, 0u) << "seed " << seed;
    if (granules) {
      const std::uint64_t before = unpaid_granules(start, paid, kGranule);
      const std::uint64_t after = unpaid_granules(searched, paid, kGranule);
      EXPECT_LE(after, before) << "seed " << seed;
      if (after == before) {
        EXPECT_LE(searched.footprint, start.footprint) << "seed " << seed;
      }
    } else {
      EXPECT_LE(searched.footprint, start.footprint) << "seed " << seed;
    }
  }
}

TEST(EnginePlanSearch, NoPackingIsBelowTheMaxLoad) {
  for (std::uint64_t seed = 1; seed <= 12; ++seed) {
    std::mt19937_64 random(100 + seed);
    StepObservation step = random_step(random, 200);
    step.pair_leftovers();
    for (StepObservation::Request& r : step.requests) r.pinned = 0;  // nothing pinned, no obstacle: the bound holds
    const StepPlan start = pack_step(step, {}, kBase, 1ull << 36, {PackOrder::lifetime, false, true});
    const StepPlan searched = improve_plan(step, {}, kBase, 1ull << 36, start, {.budget = 2'000'000});
    ASSERT_NO_FATAL_FAILURE(expect_no_overlap_at_any_tick(step, searched, {}));
    EXPECT_GE(searched.footprint, step_max_load(step)) << "seed " << seed;
    EXPECT_GE(start.footprint, step_max_load(step)) << "seed " << seed;
  }
}

TEST(EnginePlanSearch, SameInputSamePlan) {
  std::mt19937_64 random(42);
  StepObservation step = random_step(random, 300);
  const std::vector<Obstacle> obstacles = step.leftovers_as_obstacles();
  const StepPlan start = pack_step(step, obstacles, kBase, 1ull << 36);
  SearchReport first_report, second_report;
  const StepPlan first = improve_plan(step, obstacles, kBase, 1ull << 36, start, {.budget = 1'000'000}, &first_report);
  const StepPlan second = improve_plan(step, obstacles, kBase, 1ull << 36, start, {.budget = 1'000'000}, &second_report);
  ASSERT_EQ(first.entries.size(), second.entries.size());
  for (std::size_t i = 0; i < first.entries.size(); ++i) ASSERT_EQ(first.entries[i].addr, second.entries[i].addr) << i;
  EXPECT_EQ(first_report.work, second_report.work);
  EXPECT_EQ(first_report.moves, second_report.moves);
  EXPECT_EQ(first_report.accepted, second_report.accepted);
}

TEST(EnginePlanSearch, HonoursItsBudget) {
  std::mt19937_64 random(9);
  StepObservation step = random_step(random, 300);
  const std::vector<Obstacle> obstacles = step.leftovers_as_obstacles();
  const StepPlan start = pack_step(step, obstacles, kBase, 1ull << 36);
  // No budget: no move, the start as it is.
  SearchReport none;
  const StepPlan same = improve_plan(step, obstacles, kBase, 1ull << 36, start, {.budget = 0}, &none);
  EXPECT_EQ(none.moves, 0u);
  EXPECT_EQ(none.work, 0u);
  for (std::size_t i = 0; i < start.entries.size(); ++i) ASSERT_EQ(same.entries[i].addr, start.entries[i].addr);
  // A budget, with no patience (it stops only when the budget is spent): spent, and overrun by at most one move
  // (48 entries re-placed, each looking at every request, its blocks and the leftovers, and the walks of a move).
  const std::uint64_t per_move = 48 * 3 * (step.requests.size() + 1);
  std::uint64_t last_footprint = start.footprint;
  for (const std::uint64_t budget : {100'000ull, 400'000ull, 1'600'000ull}) {
    SearchReport report;
    const StepPlan plan = improve_plan(step, obstacles, kBase, 1ull << 36, start,
                                       {.budget = budget, .patience = UINT64_MAX}, &report);
    EXPECT_GE(report.work, budget);
    EXPECT_LT(report.work, budget + per_move) << "budget " << budget;
    // The same seed walks the same path: a larger budget only goes further along it.
    EXPECT_LE(plan.footprint, last_footprint) << "budget " << budget;
    last_footprint = plan.footprint;
  }
}

// Five requests, in MiB: r0 3 [0,1), r1 4 [2,4), r2 3 [3,6), r3 3 [5,9), r4 4 [7,8). At most 7 MiB is live at once
// (r1 + r2 at tick 3, r3 + r4 at tick 7), and 7 is reachable: r1 at 0, r2 at 4, r3 at 0, r4 at 3. Every greedy
// order places r1 and r4 (the 4 MiB ones, or the ones that come first by their rule) both at 0, since their
// lifetimes never meet; r2 then sits at 4 over r1, and r3, which meets r2 and r4, cannot go lower than 7: 10 MiB.
StepObservation greedy_trap() {
  StepObservation step;
  const auto a = [&](std::uint64_t id, std::uint64_t mib) { step.allocated(id, mib * MiB); };
  const auto f = [&](std::uint64_t id) { step.freed(id, 0); };
  a(1, 3), f(1), a(2, 4), a(3, 3), f(2), a(4, 3), f(3), a(5, 4), f(5), f(4);
  return step;
}

TEST(EnginePlanSearch, BeatsEveryGreedyOrderOnAStepWhereGreedyIsShort) {
  const StepObservation step = greedy_trap();
  ASSERT_EQ(step_max_load(step), 7 * MiB);
  StepPlan best_greedy;
  for (const PackOrder order : {PackOrder::size, PackOrder::lifetime, PackOrder::area})
    for (const bool best_fit : {true, false})
      for (const bool slide_down : {false, true}) {
        StepPlan plan = pack_step(step, {}, kBase, 1ull << 36, {order, best_fit, slide_down});
        EXPECT_GE(plan.footprint, 10 * MiB) << "order " << static_cast<int>(order) << " best fit " << best_fit;
        if (best_greedy.entries.empty() || plan.footprint < best_greedy.footprint) best_greedy = std::move(plan);
      }
  SearchReport report;
  const StepPlan searched = improve_plan(step, {}, kBase, 1ull << 36, best_greedy, {.budget = 10'000'000}, &report);
  ASSERT_NO_FATAL_FAILURE(expect_no_overlap_at_any_tick(step, searched, {}));
  EXPECT_EQ(searched.footprint, 7 * MiB) << "the optimum: the step's max load";
  EXPECT_GT(report.improved, 0u);
  EXPECT_LT(report.work, 10'000'000u) << "it stops once `patience` moves in a row improved nothing";
}

// The greedy trap in granules of 2 MiB (3 and 4 granules): every greedy order needs 10 granules, the step holds 7 at
// once.
StepObservation greedy_trap_in_granules() {
  StepObservation step;
  const auto a = [&](std::uint64_t id, std::uint64_t granules) { step.allocated(id, granules * 2 * MiB); };
  const auto f = [&](std::uint64_t id) { step.freed(id, 0); };
  a(1, 3), f(1), a(2, 4), a(3, 3), f(2), a(4, 3), f(3), a(5, 4), f(5), f(4);
  return step;
}

// In the engine: the same step in granules (3 and 4 granules of 2 MiB). Under a 16 MiB limit no greedy candidate
// fits (20 MiB); best_plan's search makes the plan fit (14 MiB) and keeps it.
TEST(EnginePlanSearch, BestPlanKeepsTheSearchedPlanWhenItFitsWhereNoGreedyOneDoes) {
  const StepObservation step = greedy_trap_in_granules();
  backings::SimBacking sim(1ull << 33);
  HeapOptions options;
  options.limit = 16 * MiB;
  Heap heap(sim, options);
  const std::vector<Obstacle> none;
  for (std::size_t c = 0; c < kCandidates; ++c) {
    PackOptions pack = kPlanCandidates[c].pack;
    std::vector<bool> paid(heap.span_bytes() / heap.granules().granule(), false);
    if (kPlanCandidates[c].granule_aware) {
      pack.granule = heap.granules().granule();
      pack.paid = &paid;
    }
    EXPECT_FALSE(plan_cost(pack_step(step, none, heap.base(), heap.span_bytes(), pack), heap).fits) << c;
  }
  std::size_t chosen = 0;
  const StepPlan plan = best_plan({step, none}, {step, none}, heap, &chosen);
  EXPECT_EQ(chosen, kCandidates) << "the search's plan";
  const PlanCost cost = plan_cost(plan, heap);
  EXPECT_TRUE(cost.fits);
  EXPECT_EQ(cost.granules, 7u);
  ASSERT_NO_FATAL_FAILURE(expect_no_overlap_at_any_tick(step, plan, {}));
}

// The load bound with obstacles: an obstacle counts until its tick, a request over its lifetime; and no packing
// around the obstacles covers fewer bytes (in 64 KiB units here) than it.
TEST(EnginePlanSearch, TheLoadBoundCountsObstaclesUntilTheirTickAndNoPlanCoversLess) {
  StepObservation small;
  small.allocated(1, 2 * MiB);  // tick 0
  small.freed(1, 0);            // tick 1
  small.allocated(2, 3 * MiB);  // tick 2
  small.freed(2, 0);            // tick 3
  EXPECT_EQ(step_max_load(small), 3 * MiB);
  EXPECT_EQ(step_max_load(small, {{kBase, 4 * MiB, 2}}), 6 * MiB) << "the obstacle meets only the first request";
  EXPECT_EQ(step_max_load(small, {{kBase, 4 * MiB}}), 7 * MiB) << "an obstacle for the whole step meets both";

  constexpr std::uint64_t kUnit = 64 * KiB;
  for (std::uint64_t seed = 1; seed <= 8; ++seed) {
    std::mt19937_64 random(300 + seed);
    StepObservation step = random_step(random, 200);
    std::vector<Obstacle> obstacles = step.leftovers_as_obstacles();
    obstacles.push_back({kBase + 5 * MiB, 3 * MiB});
    obstacles.push_back({kBase + 12 * MiB, 1 * MiB, step.ticks / 3});
    const std::uint64_t load = step_max_load(step, obstacles);
    for (const PackOrder order : {PackOrder::size, PackOrder::lifetime, PackOrder::area}) {
      StepPlan plan = pack_step(step, obstacles, kBase, 1ull << 36, {order, true, false});
      if (order == PackOrder::area) plan = improve_plan(step, obstacles, kBase, 1ull << 36, plan, {.budget = 500'000});
      std::vector<std::uint64_t> units;  // the 64 KiB units entries and obstacles cover
      const auto cover = [&](std::uint64_t addr, std::uint64_t size) {
        for (std::uint64_t u = addr / kUnit; u < (addr + size + kUnit - 1) / kUnit; ++u) units.push_back(u);
      };
      for (const StepPlan::Entry& e : plan.entries)
        if (e.addr != 0) cover(e.addr, e.size);
      for (const Obstacle& o : obstacles) cover(o.addr, o.size);
      std::sort(units.begin(), units.end());
      units.erase(std::unique(units.begin(), units.end()), units.end());
      EXPECT_GE(units.size() * kUnit, load) << "seed " << seed << " order " << static_cast<int>(order);
    }
  }
}

// best_plan does not search when the load bound says no plan of that preparation can fit: the greedy trap in
// granules under a 12 MiB limit (6 granules; the step holds 7 at once) keeps the greedy plan (10 granules), which the
// search would have taken to 7, still unfit.
TEST(EnginePlanSearch, BestPlanDoesNotSearchWhereNoPlanCanFit) {
  const StepObservation step = greedy_trap_in_granules();
  backings::SimBacking sim(1ull << 33);
  HeapOptions options;
  options.limit = 12 * MiB;
  Heap heap(sim, options);
  const std::vector<Obstacle> none;
  std::size_t chosen = kCandidates;
  const StepPlan plan = best_plan({step, none}, {step, none}, heap, &chosen);
  EXPECT_LT(chosen, kCandidates) << "a greedy plan, not the search's";
  const PlanCost cost = plan_cost(plan, heap);
  EXPECT_FALSE(cost.fits);
  EXPECT_EQ(cost.granules, 10u);
}

}  // namespace
}  // namespace plimsoll::engine
