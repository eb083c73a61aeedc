// Replaying traces through real allocators: the numbers a replay reports, the steady-state split at the end of
// the first step, the stop at the first OutOfMemory and the cleanup after it.
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "plimsoll/allocator.hpp"
#include "plimsoll/error.hpp"
#include "plimsoll/policy.hpp"
#include "plimsoll/runtime.hpp"
#include "policy_builder.hpp"
#include "plimsoll/trace.hpp"
#include "telemetry/replay/replay.hpp"
#include "telemetry/traces/repeat_step.hpp"

namespace plimsoll::telemetry {
namespace {

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;

// Live: 3, 4, 1 MiB before the steps; a 3 MiB block comes and goes in step 0; step 1 needs 8 MiB more, which
// only fresh mappings can give.
const char* const kGrowingTrace =
    "a 1 3145728\n"     // 0
    "a 2 1048576\n"     // 1
    "f 1\n"             // 2
    "# step 0 begin\n"  // 3
    "a 3 3145728\n"     // 4
    "f 3\n"             // 5
    "# step 0 end\n"    // 6
    "# step 1 begin\n"  // 7
    "a 4 8388608\n"     // 8
    "f 4\n"             // 9
    "# step 1 end\n"    // 10
    "f 2\n";            // 11

TEST(TelemetryReplay, ReportsPeaksAndCountsOnSim) {
  Runtime runtime(quiet_config(Growth::on_demand, 64 * kMiB));
  Allocator& allocator = runtime.device("sim:1GiB");
  const Trace trace = parse_trace(kGrowingTrace, "growing.trace");
  const Stats before = allocator.stats();

  const ReplayResult result = replay(trace, allocator, {});

  EXPECT_EQ(result.trace, "growing.trace");
  EXPECT_EQ(result.device, allocator.description().name);
  EXPECT_EQ(result.policy, "on_demand");
  EXPECT_EQ(result.peak_live_bytes, 9 * kMiB);
  EXPECT_GE(result.peak_in_use_bytes, 9 * kMiB);
  EXPECT_GE(result.peak_reserved_bytes, result.peak_in_use_bytes);
  EXPECT_LE(result.peak_reserved_bytes, 64 * kMiB);
  EXPECT_DOUBLE_EQ(result.reserved_over_live,
                   static_cast<double>(result.peak_reserved_bytes) / static_cast<double>(9 * kMiB));
  EXPECT_EQ(result.ops, 8u);
  EXPECT_GT(result.ns_per_op, 0.0);
  EXPECT_FALSE(result.oom);
  EXPECT_FALSE(result.oom_event.has_value());
  EXPECT_TRUE(result.oom_message.empty());

  // The counts are the allocator's own, taken over the replay (the cleanup maps nothing).
  const Stats after = allocator.stats();
  EXPECT_EQ(result.maps, after.maps - before.maps);
  EXPECT_GE(result.maps, 1u);
  // Step 1's 8 MiB block cannot fit in what steps before it mapped, so steady state maps more; the first
  // mappings came before the end of step 0 and are not steady-state traffic.
  EXPECT_GE(result.steady_maps, 1u);
  EXPECT_LT(result.steady_maps, result.maps);
  EXPECT_LE(result.steady_unmaps, result.unmaps);

  EXPECT_EQ(after.live_allocations, 0u);
  EXPECT_EQ(after.in_use_bytes, 0u);
}

TEST(TelemetryReplay, WarmCacheMeansNoSteadyMaps) {
  // Every step reuses the same 3 MiB: once step 0 has mapped it, the cached memory serves later steps.
  const Trace trace = parse_trace(
      "# step 0 begin\na 1 3145728\nf 1\n# step 0 end\n"
      "# step 1 begin\na 2 3145728\nf 2\n# step 1 end\n"
      "# step 2 begin\na 3 3145728\nf 3\n# step 2 end\n",
      "warm.trace");
  Runtime runtime(quiet_config(Growth::on_demand, 64 * kMiB));
  const ReplayResult result = replay(trace, runtime.device("sim:1GiB"), {});
  EXPECT_GE(result.maps, 1u);
  EXPECT_EQ(result.steady_maps, 0u);
  EXPECT_EQ(result.steady_unmaps, 0u);
}

TEST(TelemetryReplay, PreallocateReservesTheWholeLimitBeforeTheFirstEvent) {
  Runtime runtime(quiet_config(Growth::preallocate, 64 * kMiB));
  const Trace trace = parse_trace(kGrowingTrace, "growing.trace");
  const ReplayResult result = replay(trace, runtime.device("sim:1GiB"), {});
  EXPECT_EQ(result.policy, "preallocate");
  EXPECT_EQ(result.peak_reserved_bytes, 64 * kMiB);
  EXPECT_DOUBLE_EQ(result.reserved_over_live, 64.0 / 9.0);
  EXPECT_EQ(result.maps, 0u);
  EXPECT_EQ(result.steady_maps, 0u);
  EXPECT_FALSE(result.oom);
}

TEST(TelemetryReplay, StopsAtTheFirstOutOfMemoryAndFreesWhatIsLive) {
  const Trace trace = parse_trace(
      "a 1 4194304\n"
      "a 2 2097152\n"
      "\n"
      "a 3 6291456\n"  // event 2, line 4: 12 MiB live does not fit in 8 MiB
      "a 4 1024\n"
      "f 1\nf 2\nf 3\nf 4\n",
      "oom.trace");
  Runtime runtime(quiet_config(Growth::on_demand, 8 * kMiB));
  Allocator& allocator = runtime.device("sim:1GiB");

  const ReplayResult result = replay(trace, allocator, {});

  EXPECT_TRUE(result.oom);
  ASSERT_TRUE(result.oom_event.has_value());
  EXPECT_EQ(*result.oom_event, 2u);
  EXPECT_EQ(result.oom_line, 4u);
  EXPECT_FALSE(result.oom_message.empty());
  EXPECT_EQ(result.ops, 2u);

  const Stats after = allocator.stats();
  EXPECT_EQ(after.live_allocations, 0u);
  EXPECT_EQ(after.in_use_bytes, 0u);
  // Emptied, the device can hold the whole 8 MiB again.
  void* block = allocator.allocate(8 * kMiB);
  EXPECT_NE(block, nullptr);
  allocator.deallocate(block);
}

TEST(TelemetryReplay, ATraceWithoutStepsHasNoSteadyState) {
  const Trace trace = parse_trace("a 1 3145728\nf 1\na 2 6291456\nf 2\n", "flat.trace");
  Runtime runtime(quiet_config(Growth::on_demand, 64 * kMiB));
  const ReplayResult result = replay(trace, runtime.device("sim:1GiB"), {});
  EXPECT_GE(result.maps, 1u);
  EXPECT_EQ(result.steady_maps, 0u);
  EXPECT_EQ(result.steady_unmaps, 0u);
}

TEST(TelemetryReplay, TouchingIsSkippedOnSimulatedMemory) {
  // Simulated addresses are not memory: writing to them would crash, so the option must be ignored there.
  const Trace trace = parse_trace(kGrowingTrace, "growing.trace");
  Runtime runtime(quiet_config(Growth::on_demand, 64 * kMiB));
  const ReplayResult result = replay(trace, runtime.device("sim:1GiB"), {.touch_memory = true});
  EXPECT_EQ(result.ops, 8u);
}

TEST(TelemetryReplay, TouchesHostMemory) {
  const Trace trace = parse_trace(kGrowingTrace, "growing.trace");
  Runtime runtime(quiet_config(Growth::on_demand, 64 * kMiB));
  Allocator& allocator = runtime.device("cpu");
  const ReplayResult result = replay(trace, allocator, {.touch_memory = true});
  EXPECT_EQ(result.ops, 8u);
  EXPECT_FALSE(result.oom);
  EXPECT_EQ(allocator.stats().live_allocations, 0u);
}

TEST(TelemetryReplay, HandBuiltTraceWithABadSlotIsRejected) {
  Trace trace;
  trace.origin = "hand";
  trace.slots = 1;
  trace.events.push_back(TraceEvent{.kind = TraceEvent::Kind::allocate, .slot = 0, .bytes = 64, .line = 1});
  trace.events.push_back(TraceEvent{.kind = TraceEvent::Kind::allocate, .slot = 5, .bytes = 64, .line = 2});
  Runtime runtime(quiet_config(Growth::on_demand, 64 * kMiB));
  Allocator& allocator = runtime.device("sim:1GiB");
  EXPECT_THROW(replay(trace, allocator, {}), InvalidArgument);
  // The block of the first event was given back on the way out.
  EXPECT_EQ(allocator.stats().live_allocations, 0u);
}

TEST(TelemetryReplay, RealTraceReplaysToAnEmptyDevice) {
  const Trace trace = read_trace(std::string(PLIMSOLL_TRACES_DIR) + "/gpt-6-512-b8.trace");
  Runtime runtime(quiet_config(Growth::on_demand, 16 * 1024 * kMiB));
  Allocator& allocator = runtime.device("sim:32GiB");
  const ReplayResult result = replay(trace, allocator, {});
  EXPECT_FALSE(result.oom);
  EXPECT_EQ(result.ops, trace.allocations + trace.frees);
  EXPECT_GE(result.peak_in_use_bytes, trace.peak_live_bytes);
  EXPECT_GE(result.reserved_over_live, 1.0);
  EXPECT_EQ(allocator.stats().live_allocations, 0u);
}

TEST(TelemetryReplay, MapsByStepSplitTheTrafficAtTheBoundaries) {
  Runtime runtime(quiet_config(Growth::on_demand, 64 * kMiB));
  Allocator& allocator = runtime.device("sim:1GiB");
  const Trace trace = parse_trace(kGrowingTrace, "growing.trace");
  const ReplayResult result = replay(trace, allocator, {});
  ASSERT_EQ(result.maps_by_step.size(), 2u);
  ASSERT_EQ(result.unmaps_by_step.size(), 2u);
  EXPECT_EQ(result.maps_by_step[0], 0u) << "step 0's 3 MiB comes from what the setup freed";
  EXPECT_GE(result.maps_by_step[1], 1u) << "step 1's 8 MiB needs fresh mappings";
  EXPECT_EQ(result.maps_by_step[1], result.steady_maps);
  EXPECT_LT(result.maps_by_step[0] + result.maps_by_step[1], result.maps) << "the setup mapped before step 0";
}

TEST(TelemetryReplay, MapsByStepStopAtTheStepThatRanOutOfMemory) {
  Runtime runtime(quiet_config(Growth::on_demand, 8 * kMiB));
  const Trace trace = parse_trace(kGrowingTrace, "growing.trace");
  const ReplayResult result = replay(trace, runtime.device("sim:1GiB"), {});
  ASSERT_TRUE(result.oom);
  EXPECT_EQ(result.maps_by_step.size(), 2u) << "step 1 was entered, and counts up to its OOM";
}

// Checks that a trace is well formed: every free frees a live slot, nothing is allocated twice, nothing stays
// live at the end; returns the slots' peak live bytes.
std::uint64_t check_well_formed(const Trace& trace) {
  std::vector<int> state(trace.slots, 0);  // 0 never, 1 live, 2 freed
  std::vector<std::uint64_t> bytes(trace.slots, 0);
  std::uint64_t live = 0;
  std::uint64_t peak = 0;
  for (const TraceEvent& event : trace.events) {
    if (event.kind == TraceEvent::Kind::allocate) {
      EXPECT_LT(event.slot, trace.slots);
      EXPECT_EQ(state.at(event.slot), 0) << "slot " << event.slot << " allocated twice";
      state.at(event.slot) = 1;
      bytes.at(event.slot) = event.bytes;
      live += event.bytes;
      peak = std::max(peak, live);
    } else if (event.kind == TraceEvent::Kind::free) {
      EXPECT_EQ(state.at(event.slot), 1) << "slot " << event.slot << " freed while not live";
      state.at(event.slot) = 2;
      live -= bytes.at(event.slot);
    }
  }
  EXPECT_EQ(live, 0u) << "the teardown frees everything";
  return peak;
}

TEST(TelemetryReplayRepeat, CopiesFreeThePreviousCopysLeftoversAndKeepWhatTheStepKeepsForGood) {
  // Step 1 keeps a gradient (2 MiB) that step 2 frees and replaces, and keeps a batch (1 MiB) for good: a leak.
  const Trace trace = parse_trace(
      "a 1 1048576\n"
      "# step 0 begin\na 2 2097152\n# step 0 end\n"
      "# step 1 begin\na 3 2097152\nf 2\na 4 4194304\nf 4\n# step 1 end\n"
      "# step 2 begin\na 5 2097152\nf 3\na 6 4194304\nf 6\na 7 1048576\n# step 2 end\n"
      "f 5\nf 7\nf 1\n",
      "repeat.trace");
  const Trace repeated = repeat_last_step(trace, 3);
  ASSERT_EQ(repeated.steps.size(), 6u);
  for (int k = 0; k < 6; ++k) EXPECT_EQ(repeated.steps[static_cast<std::size_t>(k)].number, k);
  EXPECT_EQ(repeated.slots, trace.slots + 3 * 3);
  EXPECT_EQ(repeated.allocations, trace.allocations + 3 * 3);
  EXPECT_EQ(repeated.frees, repeated.allocations);
  // At the last copy's temporary: 1 MiB of weights, its gradient, the 4 MiB temporary, and the batches leaked by
  // step 2 and the two copies before it.
  EXPECT_EQ(repeated.peak_live_bytes, (1 + 2 + 4 + 3) * kMiB);
  EXPECT_EQ(check_well_formed(repeated), repeated.peak_live_bytes);
  // Each copy is the last step again: the same sizes in the same order, between its own step markers.
  const TraceStep& last = trace.steps.back();
  for (std::size_t k = 3; k < 6; ++k) {
    const TraceStep& copy = repeated.steps[k];
    ASSERT_EQ(copy.end - copy.begin, last.end - last.begin);
    for (std::size_t i = 0; i < copy.end - copy.begin; ++i) {
      EXPECT_EQ(repeated.events[copy.begin + i].kind, trace.events[last.begin + i].kind);
      EXPECT_EQ(repeated.events[copy.begin + i].bytes, trace.events[last.begin + i].bytes);
    }
    ASSERT_GT(copy.begin, 0u);
    EXPECT_EQ(repeated.markers.at(repeated.events[copy.begin - 1].slot), "step " + std::to_string(k) + " begin");
    EXPECT_EQ(repeated.markers.at(repeated.events[copy.end].slot), "step " + std::to_string(k) + " end");
  }
  // And it replays: every step after the first two reuses what step 2 mapped, leak aside.
  Runtime runtime(quiet_config(Growth::on_demand, 64 * kMiB));
  const ReplayResult result = replay(repeated, runtime.device("sim:1GiB"), {});
  EXPECT_FALSE(result.oom);
  EXPECT_EQ(result.maps_by_step.size(), 6u);
}

TEST(TelemetryReplayRepeat, ZeroRepeatsIsTheTraceAndBadCountsAreRefused) {
  const Trace trace = parse_trace(kGrowingTrace, "growing.trace");
  const Trace same = repeat_last_step(trace, 0);
  EXPECT_EQ(same.events.size(), trace.events.size());
  EXPECT_EQ(same.steps.size(), trace.steps.size());
  EXPECT_THROW(repeat_last_step(trace, kMaxStepRepeats + 1), InvalidArgument);
  EXPECT_THROW(check_step_repeats(kMaxStepRepeats + 1), InvalidArgument);
  EXPECT_NO_THROW(check_step_repeats(kMaxStepRepeats));
  const Trace flat = parse_trace("a 1 1024\nf 1\n", "flat.trace");
  EXPECT_THROW(repeat_last_step(flat, 1), InvalidArgument);
  // No repeats asked: a trace without steps is replayed as it is, not refused.
  const Trace flat_as_is = repeat_last_step(flat, 0);
  EXPECT_EQ(flat_as_is.events.size(), flat.events.size());
}

TEST(TelemetryReplayRepeat, ATimedTraceStaysInTimeOrderMarkersAndTeardownIncluded) {
  // Step 2 leaks a batch, so the teardown starts with the copies' unpaired frees.
  Trace trace = parse_trace(
      "a 1 1048576\n"
      "# step 0 begin\na 2 2097152\n# step 0 end\n"
      "# step 1 begin\na 3 2097152\nf 2\n# step 1 end\n"
      "# step 2 begin\na 5 2097152\nf 3\na 7 1048576\n# step 2 end\n"
      "f 5\nf 7\nf 1\n",
      "timed.trace");
  trace.has_times = true;
  for (std::size_t i = 0; i < trace.events.size(); ++i) trace.events[i].time_ns = 1000 * (i + 1);
  const Trace repeated = repeat_last_step(trace, 3);
  ASSERT_EQ(repeated.steps.size(), 6u);
  for (std::size_t i = 1; i < repeated.events.size(); ++i) {
    EXPECT_LE(repeated.events[i - 1].time_ns, repeated.events[i].time_ns) << "event " << i;
  }
  EXPECT_EQ(check_well_formed(repeated), repeated.peak_live_bytes);
}

TEST(TelemetryReplayRepeat, ARealTraceRepeatedStaysWellFormedAndReplays) {
  const Trace trace = read_trace(std::string(PLIMSOLL_TRACES_DIR) + "/gpt-6-512-b8.trace");
  const Trace repeated = repeat_last_step(trace, 4);
  ASSERT_EQ(repeated.steps.size(), trace.steps.size() + 4);
  EXPECT_EQ(check_well_formed(repeated), repeated.peak_live_bytes);
  EXPECT_EQ(repeated.peak_live_bytes, trace.peak_live_bytes) << "a step that pairs every leftover does not grow";
  Runtime runtime(quiet_config(Growth::on_demand, 16 * 1024 * kMiB));
  Allocator& allocator = runtime.device("sim:32GiB");
  const ReplayResult result = replay(repeated, allocator, {});
  EXPECT_FALSE(result.oom);
  EXPECT_EQ(result.ops, repeated.allocations + repeated.frees);
  EXPECT_EQ(allocator.stats().live_allocations, 0u);
}

TEST(TelemetryReplayRepeat, DetectedStepsRepeatWithoutMarkers) {
  // Six unmarked steps of one pattern; each frees the block the step before kept.
  std::string text = "a 1 1048576\n";
  int id = 2;
  int kept = 0;
  for (int step = 0; step < 6; ++step) {
    std::vector<int> ids;
    for (const std::uint64_t bytes : {4194304u, 2097152u, 3145728u, 1048576u, 524288u, 8388608u, 65536u, 131072u}) {
      text += "a " + std::to_string(id) + " " + std::to_string(bytes) + "\n";
      ids.push_back(id++);
      if (ids.size() == 3 && kept != 0) text += "f " + std::to_string(kept) + "\n";
    }
    for (std::size_t k = 0; k + 1 < ids.size(); ++k) text += "f " + std::to_string(ids[k]) + "\n";
    kept = ids.back();
  }
  text += "f " + std::to_string(kept) + "\nf 1\n";
  Trace trace = parse_trace(text, "unmarked.trace");
  fill_missing_steps(trace);
  ASSERT_EQ(trace.step_source, StepSource::detected);
  const Trace repeated = repeat_last_step(trace, 3);
  EXPECT_EQ(repeated.steps.size(), trace.steps.size() + 3);
  EXPECT_EQ(repeated.markers.size(), trace.markers.size()) << "no markers where the steps had none";
  EXPECT_EQ(check_well_formed(repeated), repeated.peak_live_bytes);
  EXPECT_EQ(repeated.peak_live_bytes, trace.peak_live_bytes);
  Runtime runtime(quiet_config(Growth::on_demand, 64 * kMiB));
  const ReplayResult result = replay(repeated, runtime.device("sim:1GiB"), {});
  EXPECT_FALSE(result.oom);
  EXPECT_EQ(result.maps_by_step.size(), repeated.steps.size());
}

}  // namespace
}  // namespace plimsoll::telemetry
