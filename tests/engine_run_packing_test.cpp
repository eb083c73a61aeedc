// The whole-run packing (engine/run_packing.hpp, engine/run_input.hpp) on constructed traces whose best packing is
// known by hand, and its handling of bad input; make_run_plan's plan of it.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/heap.hpp"
#include "engine/run_input.hpp"
#include "engine/run_packing.hpp"
#include "engine/run_plan.hpp"
#include "plimsoll/error.hpp"
#include "plimsoll/trace.hpp"
#include "run_packing_checks.hpp"

namespace {

using plimsoll::engine::kRunGranule;
using plimsoll::testing::expect_valid;

constexpr std::uint64_t kMiB = 1ull << 20;

plimsoll::Trace parse(const std::string& text) { return plimsoll::parse_trace(text, "constructed.trace"); }

plimsoll::engine::RunPacking bound_of(const plimsoll::Trace& trace, std::optional<std::size_t> through = {},
                                      std::uint64_t search_work = 1'000'000) {
  return plimsoll::engine::pack_run(plimsoll::engine::observe_run(trace, plimsoll::engine::run_end(trace, through)),
                                    {.work = search_work});
}

// Two 2 MiB blocks live together, then a 4 MiB block after both are freed: 2 granules at most at once, and a
// packing that reuses their place needs exactly 2.
TEST(RunPacking, ReusesFreedGranulesExactly) {
  const plimsoll::Trace trace = parse("a 1 2097152\na 2 2097152\nf 1\nf 2\na 3 4194304\nf 3\n");
  const plimsoll::engine::RunPacking b = bound_of(trace);
  EXPECT_EQ(b.requests, 3u);
  EXPECT_EQ(b.max_load, 4 * kMiB);
  EXPECT_EQ(b.max_load_granules, 2u);
  EXPECT_EQ(b.granules, 2u);
  expect_valid(plimsoll::engine::observe_run(trace, trace.events.size()), b.plan);
}

// Placement that needs the future: a short 1 MiB block, then a 1 MiB block that lives to the end, then a 3 MiB
// block. Online best fit puts the two 1 MiB blocks at 0 and 1 MiB, and the 3 MiB block, which does not fit the
// 1 MiB hole, at 2..5 MiB: 3 granules. Knowing the run, the long-lived block goes at 0 (or 3 MiB) and the 3 MiB
// block next to it: 4 MiB live at most, 2 granules, by hand.
TEST(RunPacking, PlacesTheLongLivedBlockWhereTheFutureNeedsIt) {
  const plimsoll::Trace trace = parse("a 1 1048576\na 2 1048576\nf 1\na 3 3145728\nf 3\nf 2\n");
  const plimsoll::engine::RunPacking b = bound_of(trace);
  EXPECT_EQ(b.max_load_granules, 2u);
  EXPECT_EQ(b.granules, 2u);
  expect_valid(plimsoll::engine::observe_run(trace, trace.events.size()), b.plan);
}

// Three blocks of 1.5 MiB, all live at once: 4.5 MiB, 3 granules by load, and no placement does better.
TEST(RunPacking, CountsGranulesNotBytes) {
  const plimsoll::Trace trace = parse("a 1 1572864\na 2 1572864\na 3 1572864\nf 1\nf 2\nf 3\n");
  const plimsoll::engine::RunPacking b = bound_of(trace, {}, 0);
  EXPECT_EQ(b.max_load, 3 * 1572864u);
  EXPECT_EQ(b.max_load_granules, 3u);
  EXPECT_EQ(b.granules, 3u);
  EXPECT_EQ(b.footprint, 3 * 1572864u);
}

// Through a step: only the events up to that step's end are packed, so a later, larger block is not counted.
TEST(RunPacking, StopsAtTheStepGiven) {
  const plimsoll::Trace trace = parse(
      "# step 0 begin\na 1 2097152\nf 1\n# step 0 end\n# step 1 begin\na 2 8388608\nf 2\n# step 1 end\n");
  ASSERT_EQ(trace.steps.size(), 2u);
  const plimsoll::engine::RunPacking first = bound_of(trace, 0);
  EXPECT_EQ(first.requests, 1u);
  EXPECT_EQ(first.granules, 1u);
  const plimsoll::engine::RunPacking whole = bound_of(trace);
  EXPECT_EQ(whole.requests, 2u);
  EXPECT_EQ(whole.granules, 4u);
}

// Sizes are rounded as the heap rounds them (256 bytes), so the bound counts what the heap would map.
TEST(RunPacking, RoundsLikeTheHeap) {
  const plimsoll::Trace trace = parse("a 1 1\na 2 255\nf 1\nf 2\n");
  const plimsoll::engine::RunPacking b = bound_of(trace);
  EXPECT_EQ(b.max_load, 512u);
  EXPECT_EQ(b.granules, 1u);
}

TEST(RunPacking, CoveredGranulesUniteTheEntries) {
  plimsoll::engine::StepPlan plan;
  const std::uint64_t base = 1ull << 40;
  // [base, base + 1 MiB) and [base + 1.5 MiB, base + 2.5 MiB): granules 0 and 1; [base + 6 MiB, +1): granule 3.
  plan.entries = {{kMiB, base}, {kMiB, base + 3 * kMiB / 2}, {256, base + 6 * kMiB}};
  EXPECT_EQ(plimsoll::engine::covered_granules(plan, base, kRunGranule), 3u);
}

TEST(RunPacking, AStepPastTheEndNamesTheFix) {
  const plimsoll::Trace trace = parse("# step 0 begin\na 1 256\nf 1\n# step 0 end\n");
  try {
    (void)plimsoll::engine::run_end(trace, 1);
    FAIL() << "no error for a step past the end";
  } catch (const plimsoll::InvalidArgument& error) {
    const std::string what = error.what();
    EXPECT_NE(what.find("has 1 step (index 0), no step 1"), std::string::npos) << what;
    EXPECT_NE(what.find("--through-step"), std::string::npos) << what;
  }
  EXPECT_EQ(plimsoll::engine::run_end(trace, 0), trace.steps[0].end);
  EXPECT_EQ(plimsoll::engine::run_end(trace, {}), trace.events.size());
}

TEST(RunPacking, ATraceWithoutStepsHasNoStepToStopAt) {
  const plimsoll::Trace trace = parse("a 1 256\nf 1\n");
  try {
    (void)plimsoll::engine::run_end(trace, 0);
    FAIL() << "no error for a step in a trace without steps";
  } catch (const plimsoll::InvalidArgument& error) {
    const std::string what = error.what();
    EXPECT_NE(what.find("has no step markers"), std::string::npos) << what;
    EXPECT_EQ(what.find("0..0"), std::string::npos) << what;
    EXPECT_NE(what.find("leave out --through-step"), std::string::npos) << what;
  }
}

TEST(RunPacking, ManyStepsAreCountedWithTheirIndices) {
  const plimsoll::Trace trace =
      parse("# step 0 begin\na 1 256\nf 1\n# step 0 end\n# step 1 begin\na 2 256\nf 2\n# step 1 end\n");
  try {
    (void)plimsoll::engine::run_end(trace, 2);
    FAIL() << "no error for a step past the end";
  } catch (const plimsoll::InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("has 2 steps (indices 0..1), no step 2"), std::string::npos)
        << error.what();
  }
}

// CLI11 reads "-1" into an unsigned index as 2^64 - 1: the step is taken signed and a negative one refused.
TEST(RunPacking, ANegativeStepIsRefused) {
  EXPECT_FALSE(plimsoll::engine::step_index(std::nullopt).has_value());
  EXPECT_EQ(plimsoll::engine::step_index(3), std::optional<std::size_t>(3));
  try {
    (void)plimsoll::engine::step_index(-1);
    FAIL() << "no error for --through-step -1";
  } catch (const plimsoll::InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("--through-step -1"), std::string::npos) << error.what();
  }
  std::vector<plimsoll::Trace> traces;
  traces.push_back(parse("# step 0 begin\na 1 256\nf 1\n# step 0 end\n"));
  EXPECT_THROW((void)plimsoll::engine::prepare_runs(std::move(traces), -1, 0, 0), plimsoll::InvalidArgument);
}

// The limit is checked for every trace before any is packed: a second trace whose limit passes 2^64 bytes is
// refused by prepare_runs, naming it, not after the first has been packed.
TEST(RunPacking, ALimitPast2To64IsRefusedForEveryTraceFirst) {
  std::vector<plimsoll::Trace> traces;
  traces.push_back(plimsoll::parse_trace("a 1 256\nf 1\n", "small.trace"));      // 1e14 x 256: fine
  traces.push_back(plimsoll::parse_trace("a 1 1048576\nf 1\n", "large.trace"));  // 1e14 x 1 MiB > 2^64
  try {
    (void)plimsoll::engine::prepare_runs(std::move(traces), std::nullopt, 1e14, 0);
    FAIL() << "no error for a limit past 2^64 bytes";
  } catch (const plimsoll::InvalidArgument& error) {
    const std::string what = error.what();
    EXPECT_NE(what.find("large.trace"), std::string::npos) << what;
    EXPECT_NE(what.find("2^64"), std::string::npos) << what;
  }
  std::vector<plimsoll::Trace> fine;
  fine.push_back(plimsoll::parse_trace("a 1 256\nf 1\n", "small.trace"));
  const auto runs = plimsoll::engine::prepare_runs(std::move(fine), std::nullopt, 1e14, 0);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].limit, 25'600'000'000'000'000u);
}

// With neither option, the issue-16 target's rule: 1.01 x peak live over 1 GiB live, + 4 MiB under.
TEST(RunPacking, TheDefaultLimitIsTheTargets) {
  EXPECT_EQ(plimsoll::engine::run_limit(100 * kMiB, 0, 0), 104 * kMiB);
  EXPECT_EQ(plimsoll::engine::run_limit(1024 * kMiB, 0, 0), 1028 * kMiB);  // 1 GiB is not over 1 GiB
  EXPECT_EQ(plimsoll::engine::run_limit(2048 * kMiB, 0, 0), plimsoll::engine::limit_bytes(2048 * kMiB, 1.01, 0));
  EXPECT_EQ(plimsoll::engine::run_limit(2048 * kMiB, 0, 8), 2056 * kMiB);
}

TEST(RunPacking, MalformedAndMissingTracesAreRefused) {
  EXPECT_THROW((void)parse("a 1 256\nf 2\n"), plimsoll::InvalidArgument);  // a free of an id never allocated
  EXPECT_THROW((void)plimsoll::read_trace("/nonexistent/no-such.trace"), plimsoll::Error);
}

TEST(RunPacking, LimitsAreReadAsReplayReadsThem) {
  EXPECT_EQ(plimsoll::engine::limit_bytes(100 * kMiB, 0, 4), 104 * kMiB);
  EXPECT_EQ(plimsoll::engine::limit_bytes(1000, 1.01, 0), 1010u);
  EXPECT_EQ(plimsoll::engine::limit_bytes(1001, 1.01, 0), 1012u);  // rounded up, as replay's limit_over_live
  EXPECT_THROW((void)plimsoll::engine::limit_bytes(1000, 0, 0), plimsoll::InvalidArgument);
  EXPECT_THROW((void)plimsoll::engine::limit_bytes(1000, 1.01, 4), plimsoll::InvalidArgument);
}

// An empty run packs into nothing.
TEST(RunPacking, AnEmptyRunNeedsNoGranule) {
  const plimsoll::Trace trace = parse("# model x\n");
  const plimsoll::engine::RunPacking b = bound_of(trace);
  EXPECT_EQ(b.requests, 0u);
  EXPECT_EQ(b.granules, 0u);
  EXPECT_EQ(b.max_load_granules, 0u);
}

// Searching from every greedy packing keeps the best of them: never worse than from the best greedy one alone, and
// still a plan with no two live requests overlapping. A run of mixed sizes where greedy packings leave holes.
TEST(RunPacking, SearchingFromEveryStartIsNeverWorse) {
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
  const plimsoll::engine::StepObservation run = plimsoll::engine::observe_run(trace, trace.events.size());
  const plimsoll::engine::RunPacking one = plimsoll::engine::pack_run(run, {.work = 200'000});
  const plimsoll::engine::RunPacking every =
      plimsoll::engine::pack_run(run, {.work = 200'000, .seeds = 2, .all_starts = true});
  EXPECT_LE(every.granules, one.granules);
  EXPECT_GE(every.granules, every.max_load_granules);
  expect_valid(run, every.plan);
}

// Greedy is not enough here: every one of the 14 greedy packings needs 4 granules, while the most live at once is
// 5.25 MiB (3 granules), and the search reaches 3 (found by the review of branch runbound, by random traces). The
// only test whose result needs the search: without improve_plan, `searched` stays at 4.
TEST(RunPacking, TheSearchBeatsEveryGreedyPacking) {
  const plimsoll::Trace trace = parse(
      "a 1 2883584\na 2 3145728\nf 1\na 3 1572864\na 4 1572864\nf 4\nf 2\na 5 786432\na 6 2883584\n"
      "a 7 1048576\nf 5\nf 6\na 8 1048576\nf 7\na 9 1835008\na 10 786432\nf 3\nf 10\nf 9\na 11 524288\n"
      "f 11\nf 8\n");
  const plimsoll::engine::StepObservation run = plimsoll::engine::observe_run(trace, trace.events.size());
  const plimsoll::engine::RunPacking greedy = plimsoll::engine::pack_run(run, {.work = 0});
  EXPECT_EQ(greedy.greedy_granules, 4u);
  EXPECT_EQ(greedy.granules, 4u);
  EXPECT_EQ(greedy.max_load_granules, 3u);
  expect_valid(run, greedy.plan);
  const plimsoll::engine::RunPacking searched = plimsoll::engine::pack_run(run, {.work = 200'000});
  EXPECT_EQ(searched.greedy_granules, 4u);
  EXPECT_EQ(searched.granules, 3u);
  EXPECT_EQ(plimsoll::engine::covered_granules(searched.plan, plimsoll::engine::kRunBase, kRunGranule), 3u);
  expect_valid(run, searched.plan);
  const plimsoll::engine::RunPacking every = plimsoll::engine::pack_run(run, {.work = 200'000, .all_starts = true});
  EXPECT_LE(every.granules, searched.granules);
  EXPECT_GE(every.granules, every.max_load_granules);
  expect_valid(run, every.plan);
}

// Two 2 MiB blocks, one after the other, planned in different granules: a mapping that only grows holds both (2);
// a follower that unmaps as it frees holds one at a time (1); unmapping only before tick 1 (the first block still
// live then) keeps its granule mapped and adds the second (2), before tick 2 (nothing live) only the second (1).
TEST(RunPacking, MappedPeaksCountWhatAFollowerThatUnmapsHolds) {
  const plimsoll::Trace trace = parse("a 1 2097152\nf 1\na 2 2097152\nf 2\n");
  const plimsoll::engine::StepObservation run = plimsoll::engine::observe_run(trace, trace.events.size());
  plimsoll::engine::StepPlan plan;
  const std::uint64_t base = plimsoll::engine::kRunBase;
  plan.entries = {{2 * kMiB, base}, {2 * kMiB, base + 2 * kMiB}};
  EXPECT_EQ(plimsoll::engine::covered_granules(plan, base, kRunGranule), 2u);
  EXPECT_EQ(plimsoll::engine::mapped_peaks(run, plan, base, kRunGranule, 0).unmap_until, 2u);
  EXPECT_EQ(plimsoll::engine::mapped_peaks(run, plan, base, kRunGranule, 0).unmapping, 1u);
  EXPECT_EQ(plimsoll::engine::mapped_peaks(run, plan, base, kRunGranule, 1).unmap_until, 2u);
  EXPECT_EQ(plimsoll::engine::mapped_peaks(run, plan, base, kRunGranule, 2).unmap_until, 1u);
  EXPECT_EQ(plimsoll::engine::mapped_peaks(run, plan, base, kRunGranule, run.ticks).unmap_until, 1u);
  EXPECT_EQ(plimsoll::engine::tick_at(trace, 2), 2u);
}

// make_run_plan: every request at its packed offset from kRunBase, the fingerprint its first sizes, the covered
// granules the packing's; a run of more than kFingerprint requests keeps only the first 64 sizes.
TEST(RunPacking, ARunPlanHoldsThePackingFromItsBase) {
  std::string text;
  for (int i = 1; i <= 80; ++i) text += "a " + std::to_string(i) + " " + std::to_string(i * 1000) + "\n";
  for (int i = 1; i <= 80; i += 2) text += "f " + std::to_string(i) + "\n";
  const plimsoll::Trace trace = parse(text);
  const plimsoll::engine::StepObservation run = plimsoll::engine::observe_run(trace, trace.events.size());
  const plimsoll::engine::RunPacking packing = plimsoll::engine::pack_run(run, {.work = 10'000});
  const plimsoll::engine::RunPlan plan =
      plimsoll::engine::make_run_plan(packing, {.limit = 8 * kMiB, .through_step = 0, .source = "x.trace"});
  EXPECT_EQ(plan.granule, kRunGranule);
  EXPECT_EQ(plan.limit, 8 * kMiB);
  EXPECT_EQ(plan.source, "x.trace");
  EXPECT_EQ(plan.covered_granules, packing.granules);
  ASSERT_EQ(plan.entries.size(), 80u);
  ASSERT_EQ(plan.fingerprint.size(), plimsoll::engine::RunPlan::kFingerprint);
  for (std::size_t i = 0; i < plan.entries.size(); ++i) {
    EXPECT_EQ(plan.entries[i].size, plimsoll::engine::Heap::round((i + 1) * 1000)) << i;
    EXPECT_EQ(plan.entries[i].offset, packing.plan.entries[i].addr - plimsoll::engine::kRunBase) << i;
    if (i < plan.fingerprint.size()) {
      EXPECT_EQ(plan.fingerprint[i], plan.entries[i].size) << i;
    }
  }
}

TEST(RunPacking, ARunPlanOfAnUnplannedRequestIsRefused) {
  plimsoll::engine::RunPacking packing;
  packing.plan.entries = {{256, plimsoll::engine::kRunBase}, {256, 0}};
  EXPECT_THROW((void)plimsoll::engine::make_run_plan(packing, {.source = "x.trace"}), plimsoll::InvalidState);
}

}  // namespace
