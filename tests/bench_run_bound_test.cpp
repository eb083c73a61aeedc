// The whole-run bound (bench/run_bound.hpp) on constructed traces whose best packing is known by hand, and its
// handling of bad input.
#include <gtest/gtest.h>

#include <string>

#include "engine/plan_search.hpp"
#include "plimsoll/error.hpp"
#include "plimsoll/trace.hpp"
#include "run_bound.hpp"

namespace {

using plimsoll::bench::kRunGranule;

constexpr std::uint64_t kMiB = 1ull << 20;

plimsoll::Trace parse(const std::string& text) { return plimsoll::parse_trace(text, "constructed.trace"); }

plimsoll::bench::RunBound bound_of(const plimsoll::Trace& trace, std::optional<std::size_t> through = {},
                                   std::uint64_t search_work = 1'000'000) {
  return plimsoll::bench::pack_run(plimsoll::bench::observe_run(trace, plimsoll::bench::run_end(trace, through)),
                                   {.work = search_work});
}

// Every two requests whose lifetimes meet lie apart in the plan: the packing is one any allocator could follow.
void expect_valid(const plimsoll::engine::StepObservation& run, const plimsoll::engine::StepPlan& plan) {
  ASSERT_EQ(plan.entries.size(), run.requests.size());
  const auto died = [&](std::size_t i) {
    return run.requests[i].died == plimsoll::engine::StepObservation::kOutlives ? run.ticks : run.requests[i].died;
  };
  for (std::size_t i = 0; i < run.requests.size(); ++i) {
    EXPECT_EQ(plan.entries[i].size, run.requests[i].size);
    EXPECT_NE(plan.entries[i].addr, 0u);
    for (std::size_t j = i + 1; j < run.requests.size(); ++j) {
      const bool meet = run.requests[i].born < died(j) && run.requests[j].born < died(i);
      const bool apart = plan.entries[i].addr + plan.entries[i].size <= plan.entries[j].addr ||
                         plan.entries[j].addr + plan.entries[j].size <= plan.entries[i].addr;
      EXPECT_TRUE(!meet || apart) << "requests " << i << " and " << j << " overlap while both live";
    }
  }
}

// Two 2 MiB blocks live together, then a 4 MiB block after both are freed: 2 granules at most at once, and a
// packing that reuses their place needs exactly 2.
TEST(RunBound, ReusesFreedGranulesExactly) {
  const plimsoll::Trace trace = parse("a 1 2097152\na 2 2097152\nf 1\nf 2\na 3 4194304\nf 3\n");
  const plimsoll::bench::RunBound b = bound_of(trace);
  EXPECT_EQ(b.requests, 3u);
  EXPECT_EQ(b.max_load, 4 * kMiB);
  EXPECT_EQ(b.max_load_granules, 2u);
  EXPECT_EQ(b.granules, 2u);
  expect_valid(plimsoll::bench::observe_run(trace, trace.events.size()), b.plan);
}

// Placement that needs the future: a short 1 MiB block, then a 1 MiB block that lives to the end, then a 3 MiB
// block. Online best fit puts the two 1 MiB blocks at 0 and 1 MiB, and the 3 MiB block, which does not fit the
// 1 MiB hole, at 2..5 MiB: 3 granules. Knowing the run, the long-lived block goes at 0 (or 3 MiB) and the 3 MiB
// block next to it: 4 MiB live at most, 2 granules, by hand.
TEST(RunBound, PlacesTheLongLivedBlockWhereTheFutureNeedsIt) {
  const plimsoll::Trace trace = parse("a 1 1048576\na 2 1048576\nf 1\na 3 3145728\nf 3\nf 2\n");
  const plimsoll::bench::RunBound b = bound_of(trace);
  EXPECT_EQ(b.max_load_granules, 2u);
  EXPECT_EQ(b.granules, 2u);
  expect_valid(plimsoll::bench::observe_run(trace, trace.events.size()), b.plan);
}

// Three blocks of 1.5 MiB, all live at once: 4.5 MiB, 3 granules by load, and no placement does better.
TEST(RunBound, CountsGranulesNotBytes) {
  const plimsoll::Trace trace = parse("a 1 1572864\na 2 1572864\na 3 1572864\nf 1\nf 2\nf 3\n");
  const plimsoll::bench::RunBound b = bound_of(trace, {}, 0);
  EXPECT_EQ(b.max_load, 3 * 1572864u);
  EXPECT_EQ(b.max_load_granules, 3u);
  EXPECT_EQ(b.granules, 3u);
  EXPECT_EQ(b.footprint, 3 * 1572864u);
}

// Through a step: only the events up to that step's end are packed, so a later, larger block is not counted.
TEST(RunBound, StopsAtTheStepGiven) {
  const plimsoll::Trace trace = parse(
      "# step 0 begin\na 1 2097152\nf 1\n# step 0 end\n# step 1 begin\na 2 8388608\nf 2\n# step 1 end\n");
  ASSERT_EQ(trace.steps.size(), 2u);
  const plimsoll::bench::RunBound first = bound_of(trace, 0);
  EXPECT_EQ(first.requests, 1u);
  EXPECT_EQ(first.granules, 1u);
  const plimsoll::bench::RunBound whole = bound_of(trace);
  EXPECT_EQ(whole.requests, 2u);
  EXPECT_EQ(whole.granules, 4u);
}

// Sizes are rounded as the heap rounds them (256 bytes), so the bound counts what the heap would map.
TEST(RunBound, RoundsLikeTheHeap) {
  const plimsoll::Trace trace = parse("a 1 1\na 2 255\nf 1\nf 2\n");
  const plimsoll::bench::RunBound b = bound_of(trace);
  EXPECT_EQ(b.max_load, 512u);
  EXPECT_EQ(b.granules, 1u);
}

TEST(RunBound, CoveredGranulesUniteTheEntries) {
  plimsoll::engine::StepPlan plan;
  const std::uint64_t base = 1ull << 40;
  // [base, base + 1 MiB) and [base + 1.5 MiB, base + 2.5 MiB): granules 0 and 1; [base + 6 MiB, +1): granule 3.
  plan.entries = {{kMiB, base}, {kMiB, base + 3 * kMiB / 2}, {256, base + 6 * kMiB}};
  EXPECT_EQ(plimsoll::bench::covered_granules(plan, base, kRunGranule), 3u);
}

TEST(RunBound, AStepPastTheEndNamesTheFix) {
  const plimsoll::Trace trace = parse("# step 0 begin\na 1 256\nf 1\n# step 0 end\n");
  try {
    (void)plimsoll::bench::run_end(trace, 1);
    FAIL() << "no error for a step past the end";
  } catch (const plimsoll::InvalidArgument& error) {
    const std::string what = error.what();
    EXPECT_NE(what.find("has 1 steps"), std::string::npos) << what;
    EXPECT_NE(what.find("--through-step"), std::string::npos) << what;
  }
  EXPECT_EQ(plimsoll::bench::run_end(trace, 0), trace.steps[0].end);
  EXPECT_EQ(plimsoll::bench::run_end(trace, {}), trace.events.size());
}

TEST(RunBound, ATraceWithoutStepsHasNoStepToStopAt) {
  const plimsoll::Trace trace = parse("a 1 256\nf 1\n");
  EXPECT_THROW((void)plimsoll::bench::run_end(trace, 0), plimsoll::InvalidArgument);
}

TEST(RunBound, MalformedAndMissingTracesAreRefused) {
  EXPECT_THROW((void)parse("a 1 256\nf 2\n"), plimsoll::InvalidArgument);  // a free of an id never allocated
  EXPECT_THROW((void)plimsoll::read_trace("/nonexistent/no-such.trace"), plimsoll::Error);
}

TEST(RunBound, LimitsAreReadAsReplayReadsThem) {
  EXPECT_EQ(plimsoll::bench::limit_bytes(100 * kMiB, 0, 4), 104 * kMiB);
  EXPECT_EQ(plimsoll::bench::limit_bytes(1000, 1.01, 0), 1010u);
  EXPECT_EQ(plimsoll::bench::limit_bytes(1001, 1.01, 0), 1012u);  // rounded up, as replay's limit_over_live
  EXPECT_THROW((void)plimsoll::bench::limit_bytes(1000, 0, 0), plimsoll::InvalidArgument);
  EXPECT_THROW((void)plimsoll::bench::limit_bytes(1000, 1.01, 4), plimsoll::InvalidArgument);
}

// An empty run packs into nothing.
TEST(RunBound, AnEmptyRunNeedsNoGranule) {
  const plimsoll::Trace trace = parse("# model x\n");
  const plimsoll::bench::RunBound b = bound_of(trace);
  EXPECT_EQ(b.requests, 0u);
  EXPECT_EQ(b.granules, 0u);
  EXPECT_EQ(b.max_load_granules, 0u);
}

}  // namespace

namespace {

// Searching from every greedy packing keeps the best of them: never worse than from the best greedy one alone, and
// still a plan with no two live requests overlapping. A run of mixed sizes where greedy packings leave holes.
TEST(RunBound, SearchingFromEveryStartIsNeverWorse) {
  std::string text;
  const std::uint64_t sizes[] = {3 * kMiB / 2, 5 * kMiB / 4, 9 * kMiB / 8, 7 * kMiB / 4, 3 * kMiB / 4};
  int id = 1;
  for (int round = 0; round < 6; ++round) {
    for (int k = 0; k < 5; ++k) {
      text += "a " + std::to_string(id + k) + " " + std::to_string(sizes[(k + round) % 5]) + "\n";
    }
    for (int k = 0; k < 5; k += 2) text += "f " + std::to_string(id + k) + "\n";
    for (int k = 1; k < 5; k += 2) text += "f " + std::to_string(id + k) + "\n";
    id += 5;
  }
  const plimsoll::Trace trace = parse(text);
  const plimsoll::engine::StepObservation run = plimsoll::bench::observe_run(trace, trace.events.size());
  const plimsoll::bench::RunBound one = plimsoll::bench::pack_run(run, {.work = 200'000});
  const plimsoll::bench::RunBound every =
      plimsoll::bench::pack_run(run, {.work = 200'000, .seeds = 2, .all_starts = true});
  EXPECT_LE(every.granules, one.granules);
  EXPECT_GE(every.granules, every.max_load_granules);
  expect_valid(run, every.plan);
}

}  // namespace
