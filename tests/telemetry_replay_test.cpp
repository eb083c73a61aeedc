// Replaying traces through real allocators: the numbers a replay reports, the steady-state split at the end of
// the first step, the stop at the first OutOfMemory and the cleanup after it.
#include <cstdint>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "plimsoll/allocator.hpp"
#include "plimsoll/error.hpp"
#include "plimsoll/policy.hpp"
#include "plimsoll/runtime.hpp"
#include "policy_builder.hpp"
#include "plimsoll/trace.hpp"
#include "telemetry/replay/replay.hpp"

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

}  // namespace
}  // namespace plimsoll::telemetry
