// A recording of a device that follows a transition plan (src/engine/transition_plan.hpp): the boundary that ends
// the transition maps the ideal plan whole (PlanFollower::end_transition) without packing, and a recording must
// count that mapping like any other, or the reserved bytes it shows drift from the device's.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <string>

#include "plimsoll/allocator.hpp"
#include "plimsoll/recording.hpp"
#include "plimsoll/runtime.hpp"
#include "plimsoll/trace.hpp"
#include "policy_builder.hpp"
#include "telemetry/replay/replay.hpp"

namespace plimsoll {
namespace {

constexpr std::uint64_t kGranule = 2ull << 20;

TEST(EngineTransitionRecording, TheBoundaryEndingATransitionRecordsWhatItMaps) {
  // The GPT trace at 617 granules follows a transition plan in its step 3 (packed from step 2, whose leftovers pair with step 1's) (tests/cli_transition_test.cpp checks
  // the same replay through the CLI). Replayed up to the end of that step (the replay frees what is live at its
  // end), trimmed, then one boundary: it ends the transition and maps the ideal plan whole, with no pack.
  Trace trace = read_trace(std::string(PLIMSOLL_TRACES_DIR) + "/gpt-6-512-b8.trace");
  ASSERT_GE(trace.steps.size(), 3u);
  trace.events.resize(trace.steps[2].end);
  trace.steps.resize(3);
  Config config;
  config.default_policy = PolicyOf().growth(Growth::on_demand).limit(617 * kGranule);
  config.log_device_creation = false;
  Runtime runtime(config);
  Allocator& device = runtime.device("sim:64GiB");
  const std::string path = ::testing::TempDir() + "transition-recording.plimsoll";
  auto recording = Recording::open(path);
  device.record_to(recording);
  const telemetry::ReplayResult result = telemetry::replay(trace, device, {});
  ASSERT_FALSE(result.oom);
  ASSERT_EQ(device.stats().step_plan.transitions, 1u) << "the transition this test is about";
  ASSERT_EQ(device.stats().step_plan.transitions_abandoned, 0u);
  device.trim();
  const std::uint64_t trimmed = device.stats().reserved_bytes;
  device.step();
  ASSERT_EQ(device.stats().step_plan.plans, 1u) << "the ideal plan, mapped at the boundary";
  const std::uint64_t reserved = device.stats().reserved_bytes;
  ASSERT_GT(reserved, trimmed) << "the boundary mapped something: what this test is about";
  recording->close();
  const Trace recorded = read_trace(path);
  std::filesystem::remove(path);
  std::uint64_t mapped = 0, unmapped = 0;
  for (const TraceEvent& event : recorded.events) {
    if (event.kind == TraceEvent::Kind::map) mapped += event.bytes;
    if (event.kind == TraceEvent::Kind::unmap) unmapped += event.bytes;
  }
  ASSERT_GE(mapped, unmapped);
  EXPECT_EQ(mapped - unmapped, reserved);
}

}  // namespace
}  // namespace plimsoll
