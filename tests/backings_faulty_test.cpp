// FaultyBacking over a SimBacking: failures are reproducible from a seed, land on the chosen call, are
// counted, and never reach the upstream backing.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "backings/faulty_backing.hpp"
#include "backings/sim_backing.hpp"
#include "plimsoll/error.hpp"

namespace plimsoll::backings {
namespace {

constexpr std::uint64_t MiB = std::uint64_t{1} << 20;
constexpr std::uint64_t GiB = std::uint64_t{1} << 30;

/// Maps and unmaps one granule `calls` times; returns which map() calls succeeded.
std::vector<bool> map_outcomes(const FaultPlan& plan, int calls) {
  SimBacking upstream(GiB);
  FaultyBacking faulty(upstream, plan);
  const std::uintptr_t base = faulty.reserve(2 * MiB);  // the plans here never fail a reserve()
  std::vector<bool> outcomes;
  for (int i = 0; i < calls; ++i) {
    const bool mapped = faulty.map(base, 2 * MiB);
    outcomes.push_back(mapped);
    if (mapped) faulty.unmap(base, 2 * MiB);
  }
  faulty.unreserve(base, 2 * MiB);
  return outcomes;
}

int failures(const std::vector<bool>& outcomes) {
  int count = 0;
  for (const bool mapped : outcomes) count += mapped ? 0 : 1;
  return count;
}

TEST(FaultyBacking, SameSeedSameFailures) {
  const FaultPlan plan{.map_failure_probability = 0.3, .seed = 42};
  const std::vector<bool> first = map_outcomes(plan, 500);
  EXPECT_EQ(first, map_outcomes(plan, 500));
  EXPECT_GT(failures(first), 0);
  EXPECT_LT(failures(first), 500);

  FaultPlan other = plan;
  other.seed = 43;
  EXPECT_NE(first, map_outcomes(other, 500)) << "another seed gives another sequence";
}

TEST(FaultyBacking, FailureRateFollowsTheProbability) {
  const int failed = failures(map_outcomes({.map_failure_probability = 0.25, .seed = 7}, 20000));
  EXPECT_GT(failed, 4500);
  EXPECT_LT(failed, 5500);
}

TEST(FaultyBacking, ProbabilityZeroNeverFailsAndOneAlwaysFails) {
  EXPECT_EQ(failures(map_outcomes({.map_failure_probability = 0.0, .seed = 1}, 1000)), 0);
  EXPECT_EQ(failures(map_outcomes({.map_failure_probability = 1.0, .seed = 1}, 1000)), 1000);
}

TEST(FaultyBacking, FailsExactlyTheChosenMapCall) {
  const std::vector<bool> outcomes = map_outcomes({.fail_map_call = 3}, 10);
  const std::vector<bool> expected{true, true, false, true, true, true, true, true, true, true};
  EXPECT_EQ(outcomes, expected);
}

TEST(FaultyBacking, ChosenCallAddsToRandomFailuresWithoutShiftingThem) {
  const std::vector<bool> random_only = map_outcomes({.map_failure_probability = 0.2, .seed = 9}, 200);
  std::vector<bool> with_chosen = map_outcomes({.map_failure_probability = 0.2, .seed = 9, .fail_map_call = 50}, 200);
  EXPECT_FALSE(with_chosen[49]);
  with_chosen[49] = random_only[49];
  EXPECT_EQ(with_chosen, random_only);
}

TEST(FaultyBacking, CountsCallsAndInjectedFailures) {
  SimBacking upstream(GiB);
  FaultyBacking faulty(upstream, {.fail_map_call = 2, .fail_reserve_call = 1});
  EXPECT_EQ(faulty.reserve(4 * MiB), 0U) << "the first reserve() is the chosen one";
  const std::uintptr_t base = faulty.reserve(4 * MiB);
  ASSERT_NE(base, 0U);
  EXPECT_TRUE(faulty.map(base, 2 * MiB));
  EXPECT_FALSE(faulty.map(base + 2 * MiB, 2 * MiB));
  EXPECT_TRUE(faulty.map(base + 2 * MiB, 2 * MiB));
  EXPECT_EQ(faulty.map_calls(), 3U);
  EXPECT_EQ(faulty.reserve_calls(), 2U);
  EXPECT_EQ(faulty.injected_map_failures(), 1U);
  EXPECT_EQ(faulty.injected_reserve_failures(), 1U);
  EXPECT_EQ(faulty.injected_failures(), 2U);
  faulty.unmap(base, 4 * MiB);
  faulty.unreserve(base, 4 * MiB);
}

TEST(FaultyBacking, InjectedFailureNeverReachesTheUpstream) {
  SimBacking upstream(GiB);
  FaultyBacking faulty(upstream, {.map_failure_probability = 1.0, .fail_reserve_call = 1});
  EXPECT_EQ(faulty.reserve(2 * MiB), 0U);
  const std::uintptr_t base = faulty.reserve(2 * MiB);
  ASSERT_NE(base, 0U);
  EXPECT_FALSE(faulty.map(base, 2 * MiB));
  EXPECT_EQ(upstream.mapped_bytes(), 0U);
  EXPECT_EQ(faulty.mapped_bytes(), 0U);
  // The upstream holds just the one reservation, with nothing mapped: unreserving it would abort otherwise.
  faulty.unreserve(base, 2 * MiB);
}

TEST(FaultyBacking, UpstreamRefusalIsNotCountedAsInjected) {
  SimBacking upstream(2 * MiB);
  FaultyBacking faulty(upstream, {});
  const std::uintptr_t base = faulty.reserve(4 * MiB);
  ASSERT_NE(base, 0U);
  EXPECT_FALSE(faulty.map(base, 4 * MiB)) << "larger than the simulated device";
  EXPECT_EQ(faulty.injected_failures(), 0U);
  faulty.unreserve(base, 4 * MiB);
}

TEST(FaultyBacking, ForwardsEverythingElse) {
  SimBacking upstream(16 * GiB);
  FaultyBacking faulty(upstream, {.map_failure_probability = 0.5, .seed = 3});
  EXPECT_EQ(faulty.granularity(), upstream.granularity());
  EXPECT_EQ(faulty.touchable(), upstream.touchable());
  EXPECT_EQ(faulty.memory().total_bytes, 16 * GiB);
  EXPECT_EQ(faulty.memory().free_bytes, upstream.memory().free_bytes);
  EXPECT_NE(faulty.describe().find(upstream.describe()), std::string::npos) << faulty.describe();
  EXPECT_NE(faulty.describe().find("seed 3"), std::string::npos) << faulty.describe();
}

TEST(FaultyBacking, RejectsProbabilitiesOutsideZeroToOne) {
  SimBacking upstream(GiB);
  EXPECT_THROW(FaultyBacking(upstream, {.map_failure_probability = -0.1}), InvalidArgument);
  EXPECT_THROW(FaultyBacking(upstream, {.map_failure_probability = 1.5}), InvalidArgument);
  EXPECT_THROW(FaultyBacking(upstream, {.reserve_failure_probability = std::numeric_limits<double>::quiet_NaN()}),
               InvalidArgument);
  try {
    FaultyBacking bad(upstream, {.reserve_failure_probability = 2.0});
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("between 0 and 1"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace plimsoll::backings
