// The transition plan (src/engine/transition_plan.hpp): its tick-wise count of mapped granules against an
// independent brute-force count, its validity on random steps, and a constructed step whose steady plans are all
// over the limit (static check) while the transition, costed tick by tick, fits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include "engine/granule_map.hpp"
#include "engine/plan_candidates.hpp"
#include "engine/step_plan.hpp"
#include "engine/transition_plan.hpp"

namespace plimsoll::engine {
namespace {

constexpr std::uint64_t MiB = 1ull << 20;
constexpr std::uint64_t kGranule = 2 * MiB;
constexpr std::uint64_t kBase = 1ull << 32;

// The brute force: at every tick, the set of granules of obstacles live then and entries born by then, built anew.
std::uint64_t brute_force_peak(const StepObservation& step, const std::vector<Obstacle>& obstacles,
                               const StepPlan& plan) {
  std::uint64_t peak = 0;
  for (std::uint32_t t = 0; t < step.ticks; ++t) {
    std::set<std::uint64_t> mapped;
    const auto add = [&](std::uint64_t addr, std::uint64_t size) {
      for (std::uint64_t g = (addr - kBase) / kGranule; g * kGranule < addr + size - kBase; ++g) mapped.insert(g);
    };
    for (const Obstacle& o : obstacles)
      if (o.until > t && o.size > 0) add(o.addr, o.size);
    for (std::size_t i = 0; i < plan.entries.size(); ++i)
      if (plan.entries[i].addr != 0 && step.requests[i].born <= t) add(plan.entries[i].addr, plan.entries[i].size);
    peak = std::max<std::uint64_t>(peak, mapped.size());
  }
  return peak;
}

TEST(EngineTransitionPlan, TickwisePeakMatchesABruteForceCountOnRandomSteps) {
  std::mt19937_64 random(16);
  const GranuleMap granules(kBase, 64 * kGranule, kGranule);
  for (int round = 0; round < 200; ++round) {
    // A random step: allocations and frees in random order, sizes from 256 bytes to 5 MiB.
    StepObservation step;
    std::vector<std::uint64_t> live;
    std::uint64_t next_addr = kBase + 8 * kGranule;  // the observation's own addresses: only identities here
    const int events = 5 + static_cast<int>(random() % 60);
    for (int e = 0; e < events; ++e) {
      if (!live.empty() && random() % 3 == 0) {
        const std::size_t k = random() % live.size();
        step.freed(live[k], 256);
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
      } else {
        const std::uint64_t size = (1 + random() % (5 * MiB / 256)) * 256;
        step.allocated(next_addr, size);
        live.push_back(next_addr);
        next_addr += 8 * MiB;
      }
    }
    // Random obstacles, some gone at a tick, some live all step, some never (until 0); a random plan (the count
    // does not need a valid one), a few entries unplanned (addr 0).
    std::vector<Obstacle> obstacles;
    for (int o = static_cast<int>(random() % 8); o > 0; --o)
      obstacles.push_back(Obstacle{kBase + (random() % (40 * kGranule / 256)) * 256, (1 + random() % (6 * MiB / 256)) * 256,
                                   random() % 4 == 0 ? UINT32_MAX : static_cast<std::uint32_t>(random() % (step.ticks + 1))});
    StepPlan plan;
    for (const StepObservation::Request& r : step.requests)
      plan.entries.push_back({r.size, random() % 8 == 0 ? 0 : kBase + (random() % (40 * kGranule / 256)) * 256});
    ASSERT_EQ(transition_peak_granules(step, obstacles, plan, granules), brute_force_peak(step, obstacles, plan))
        << "round " << round;
  }
}

// Live at the boundary: a weight W on granule 0 (stays), and the step's leftover L on granule 6, whose previous
// copy the step frees at tick 0. The step: free (L's previous copy), A, B, free A, L', free B. Any steady plan maps
// W, the entries A and B (live at once: two granules) and, while the old L is where it is, its granule: 4 granules.
// Tick by tick the old L is gone before anything is born: 3.
struct ConstructedStep {
  StepObservation step;
  std::vector<Obstacle> older, obstacles;
  HeapSnapshot heap;
  ConstructedStep() {
    const std::uint64_t w = kBase, old_l = kBase + 6 * kGranule, a = kBase + 20 * kGranule;
    step.freed(kBase + 30 * kGranule, kGranule);  // L's copy from the step before (older than the step)
    step.allocated(a, kGranule);
    step.allocated(a + kGranule, kGranule);
    step.freed(a, kGranule);
    step.allocated(old_l, kGranule);  // the leftover, left where best fit put it
    step.freed(a + kGranule, kGranule);
    older.push_back(Obstacle{w, kGranule});
    obstacles = older;
    for (const Obstacle& o : step.leftovers_as_obstacles()) obstacles.push_back(o);
    heap.base = kBase;
    heap.span = 32 * kGranule;
    heap.limit = 3 * kGranule;
    heap.granules = GranuleMap(kBase, heap.span, kGranule);
    heap.live_granules.assign(32, false);
    heap.live_granules[0] = heap.live_granules[6] = true;
  }
};

TEST(EngineTransitionPlan, FitsTickByTickWhereEveryStaticPlanIsOverTheLimit) {
  ConstructedStep c;
  // The steady candidates, costed statically as the engine costs them: over the limit.
  const StepPlan steady = pack_step(c.step, c.obstacles, c.heap.base, c.heap.span);
  ASSERT_FALSE(steady.entries.empty());
  EXPECT_FALSE(plan_cost(steady, c.heap).fits);
  EXPECT_EQ(plan_cost(steady, c.heap).granules, 4u);

  const TransitionPlan transition = pack_transition(c.step, c.obstacles, c.older, c.heap);
  ASSERT_FALSE(transition.plan.entries.empty());
  EXPECT_EQ(transition.peak_granules, 3u);
  EXPECT_EQ(transition.ideal_granules, 3u);
  EXPECT_TRUE(transition.fits);
  EXPECT_EQ(transition.peak_granules, brute_force_peak(c.step, c.obstacles, transition.plan));
  // The leftover's next copy goes where the ideal steady plan wants it, and once it is there (the old copy freed)
  // the ideal plan, costed statically as the engine costs a steady plan, fits: the steps after it map nothing.
  EXPECT_EQ(transition.plan.entries[2].addr, transition.ideal.entries[2].addr);
  HeapSnapshot after = c.heap;
  after.live_granules.assign(32, false);
  after.live_granules[0] = true;
  after.live_granules[after.granules.first_covering(transition.ideal.entries[2].addr)] = true;
  EXPECT_TRUE(plan_cost(transition.ideal, after).fits);
}

// The ideal plan's cost assumes every leftover's new copy at its ideal address. When something live all step sits
// there (here: a block that is not among the older ones, so the ideal plan does not see it), the transition places
// the leftover elsewhere, where it stays through the next boundary: the transition does not fit, however low its
// tick-wise peak.
TEST(EngineTransitionPlan, DoesNotFitWhenALeftoverCannotGoToItsIdealAddress) {
  ConstructedStep c;
  c.heap.limit = 8 * kGranule;  // room for everything: only the leftover's place can make it unfit
  const TransitionPlan free_way = pack_transition(c.step, c.obstacles, c.older, c.heap);
  ASSERT_TRUE(free_way.fits);
  const std::uint64_t ideal_l = free_way.ideal.entries[2].addr;
  ASSERT_EQ(free_way.plan.entries[2].addr, ideal_l);
  c.obstacles.push_back(Obstacle{ideal_l, kGranule, c.step.ticks});
  const TransitionPlan blocked = pack_transition(c.step, c.obstacles, c.older, c.heap);
  ASSERT_EQ(blocked.ideal.entries[2].addr, ideal_l) << "the ideal plan does not see the blocking block";
  ASSERT_FALSE(blocked.plan.entries.empty());
  EXPECT_NE(blocked.plan.entries[2].addr, ideal_l);
  EXPECT_LE(blocked.peak_granules * kGranule, c.heap.limit);
  EXPECT_FALSE(blocked.fits) << "the leftover is not where the ideal plan's cost puts it";
}

TEST(EngineTransitionPlan, DoesNotFitWhenTheStepsOwnLoadIsOverTheLimit) {
  ConstructedStep c;
  c.heap.limit = 2 * kGranule;  // W, A and B are live at once: no plan of any kind fits
  const TransitionPlan transition = pack_transition(c.step, c.obstacles, c.older, c.heap);
  EXPECT_FALSE(transition.fits);
  EXPECT_TRUE(transition.plan.entries.empty());
}

TEST(EngineTransitionPlan, PlansAreValidOnRandomSteps) {
  std::mt19937_64 random(61);
  for (int round = 0; round < 100; ++round) {
    StepObservation step;
    std::vector<std::uint64_t> live;
    std::uint64_t next_addr = kBase + 40 * kGranule;
    for (int e = 0; e < 40; ++e) {
      if (!live.empty() && random() % 2 == 0) {
        const std::size_t k = random() % live.size();
        step.freed(live[k], 256);
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
      } else if (random() % 6 == 0) {
        step.freed(kBase + 100 * kGranule + (random() % 1000) * 256, MiB);  // an older block
      } else {
        step.allocated(next_addr, (1 + random() % (3 * MiB / 256)) * 256);
        live.push_back(next_addr);
        next_addr += 4 * MiB;
      }
    }
    std::vector<Obstacle> older{{kBase + 3 * kGranule, MiB}}, obstacles = older;
    for (Obstacle o : step.leftovers_as_obstacles()) {
      o.addr = kBase + (o.addr - kBase - 40 * kGranule) / 8;  // leftovers where best fit left them, low
      obstacles.push_back(o);
    }
    HeapSnapshot heap{kBase, 256 * kGranule, 256 * kGranule, GranuleMap(kBase, 256 * kGranule, kGranule), {}};
    heap.live_granules.assign(256, false);
    const TransitionPlan transition = pack_transition(step, obstacles, older, heap);
    ASSERT_FALSE(transition.plan.entries.empty());
    ASSERT_EQ(transition.plan.entries.size(), step.requests.size());
    // Valid against the obstacles and itself, with each entry live from its birth (no shared range with the
    // previous copy: that one is an obstacle until its tick).
    for (std::size_t i = 0; i < step.requests.size(); ++i) {
      const auto& a = transition.plan.entries[i];
      const auto& ri = step.requests[i];
      const std::uint32_t ends_i = ri.died == StepObservation::kOutlives ? step.ticks : ri.died;
      for (const Obstacle& o : obstacles) {
        if (o.until > ri.born) {
          ASSERT_TRUE(a.addr + a.size <= o.addr || o.addr + o.size <= a.addr) << round << " " << i;
        }
      }
      for (std::size_t j = i + 1; j < step.requests.size(); ++j) {
        const auto& b = transition.plan.entries[j];
        const auto& rj = step.requests[j];
        const std::uint32_t ends_j = rj.died == StepObservation::kOutlives ? step.ticks : rj.died;
        if (a.addr + a.size <= b.addr || b.addr + b.size <= a.addr) continue;
        ASSERT_FALSE(ri.born < ends_j && rj.born < ends_i) << round << ": " << i << " and " << j;
      }
    }
    ASSERT_EQ(transition.peak_granules, brute_force_peak(step, obstacles, transition.plan));
  }
}

}  // namespace
}  // namespace plimsoll::engine
