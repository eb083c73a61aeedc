// The whole-run bound's follower (bench/run_bound.hpp): a real trace's packing followed on a heap at the limit.
// The packing's own tests: tests/engine_run_packing_test.cpp.
#include <gtest/gtest.h>

#include "engine/run_input.hpp"
#include "engine/run_packing.hpp"
#include "plimsoll/trace.hpp"
#include "run_bound.hpp"
#include "run_packing_checks.hpp"

namespace {

using plimsoll::engine::kRunGranule;
using plimsoll::testing::expect_valid;

// A real trace through step 1 (GPT, 1,329 requests): the packing is valid, and a heap at the target's limit that
// follows it places every request and maps exactly the granules the tool says (no unmaps), or the unmapping figure.
TEST(RunBound, ARealTracesPlanIsFollowedOnAHeapAtTheLimit) {
  const plimsoll::Trace trace = plimsoll::read_trace(PLIMSOLL_TRACES_DIR "/gpt-6-512-b8.trace");
  const std::size_t end = plimsoll::engine::run_end(trace, 1);
  const plimsoll::engine::StepObservation run = plimsoll::engine::observe_run(trace, end);
  ASSERT_EQ(run.requests.size(), 1329u);
  const plimsoll::engine::RunPacking b = plimsoll::engine::pack_run(run, {});
  expect_valid(run, b.plan);
  const std::uint64_t limit = plimsoll::engine::run_limit(trace.peak_live_bytes, 0, 0);
  EXPECT_LE(b.granules, limit / kRunGranule);
  const plimsoll::bench::Followed kept = plimsoll::bench::follow_on_heap(trace, end, b.plan, limit, false);
  EXPECT_EQ(kept.requests, 1329u);
  EXPECT_EQ(kept.placed, kept.requests);
  EXPECT_EQ(kept.peak_granules, b.granules);
  EXPECT_EQ(kept.unmaps, 0u);
  EXPECT_EQ(kept.self_check, "");
  const plimsoll::engine::MappedPeaks peaks = plimsoll::engine::mapped_peaks(
      run, b.plan, plimsoll::engine::kRunBase, kRunGranule, plimsoll::engine::tick_at(trace, trace.steps[0].end));
  EXPECT_LE(peaks.unmapping, peaks.unmap_until);
  EXPECT_LE(peaks.unmap_until, b.granules);
  EXPECT_GE(peaks.unmapping, b.max_load_granules);
  const plimsoll::bench::Followed unmapping = plimsoll::bench::follow_on_heap(trace, end, b.plan, limit, true);
  EXPECT_EQ(unmapping.placed, unmapping.requests);
  EXPECT_EQ(unmapping.peak_granules, peaks.unmapping);
  EXPECT_EQ(unmapping.self_check, "");
}

}  // namespace
