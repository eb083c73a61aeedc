// The device's allocation path (src/engine/allocator.cpp): a quiet locked attempt first, the reporting path only
// when it fails. A failure must still be counted and reported exactly once, with or without a step plan, and the
// cases the quiet attempt leaves to the reporting path (a tag's first use) must still be served and counted.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "backings/sim_backing.hpp"
#include "plimsoll/allocator.hpp"

namespace plimsoll {
namespace {

constexpr std::uint64_t MiB = 1ull << 20;
constexpr std::uint64_t GiB = 1ull << 30;

std::unique_ptr<Allocator> make(std::uint64_t limit) {
  DeviceDescription d;
  d.name = "sim:4GiB";
  d.hardware = "simulated device";
  d.policy.growth = Growth::on_demand;
  d.limit_bytes = limit;
  d.total_bytes = 4 * GiB;
  return std::make_unique<Allocator>(d, std::make_unique<backings::SimBacking>(4 * GiB));
}

TEST(EngineDevicePath, AFailureAfterTheQuietAttemptIsCountedAndReportedOnce) {
  auto a = make(64 * MiB);
  void* held = a->allocate(40 * MiB);  // untagged, so the tag's counter exists: the quiet attempt runs and fails
  EXPECT_THROW(a->allocate(40 * MiB), OutOfMemory);
  EXPECT_EQ(a->stats().ooms, 1u);
  EXPECT_EQ(a->try_allocate(40 * MiB), nullptr);
  EXPECT_EQ(a->stats().ooms, 2u);
  // Nothing the failed attempts did is left behind: the same request fits once the first block is gone.
  a->deallocate(held);
  void* again = a->allocate(40 * MiB);
  const Stats stats = a->stats();
  EXPECT_EQ(stats.in_use_bytes, 40 * MiB);
  EXPECT_EQ(stats.live_allocations, 1u);
  EXPECT_EQ(stats.allocations, 2u);
  a->deallocate(again);
  EXPECT_EQ(a->stats().in_use_bytes, 0u);
}

TEST(EngineDevicePath, WithAStepPlanAFailureIsStillCountedOnce) {
  auto a = make(64 * MiB);
  for (int step = 0; step < 3; ++step) {  // a few steps, so the device follows a plan
    void* x = a->allocate(8 * MiB);
    void* y = a->allocate(16 * MiB);
    a->deallocate(x);
    a->deallocate(y);
    a->step();
  }
  ASSERT_GE(a->stats().step_plan.plans, 1u);
  // Every request the plan sees lands in exactly one of these.
  const auto requests_seen = [&] {
    const StepPlanStats plan = a->stats().step_plan;
    return plan.learning + plan.followed + plan.growth + plan.fallbacks();
  };
  void* held = a->allocate(40 * MiB);
  const std::uint64_t before = requests_seen();
  EXPECT_THROW(a->allocate(40 * MiB), OutOfMemory);
  EXPECT_EQ(a->stats().ooms, 1u);
  EXPECT_EQ(requests_seen(), before + 1) << "the failing request reached the plan more than once";
  a->deallocate(held);
  EXPECT_EQ(a->stats().in_use_bytes, 0u);
  EXPECT_EQ(a->stats().live_allocations, 0u);
}

TEST(EngineDevicePath, ATagsFirstUseIsServedAndCounted) {
  auto a = make(1 * GiB);
  const Tag first = intern_tag("device-path-first");
  const Tag second = intern_tag("device-path-second");
  std::vector<void*> live;
  for (Tag tag : {second, first, second, kUntagged}) live.push_back(a->allocate(2 * MiB, tag));
  const Stats stats = a->stats();
  std::uint64_t second_bytes = 0, first_bytes = 0;
  for (const TagStats& tag : stats.tags) {
    if (tag.tag == "device-path-second") second_bytes = tag.in_use_bytes;
    if (tag.tag == "device-path-first") first_bytes = tag.in_use_bytes;
  }
  EXPECT_EQ(second_bytes, 4 * MiB);
  EXPECT_EQ(first_bytes, 2 * MiB);
  EXPECT_EQ(stats.ooms, 0u);
  for (void* block : live) a->deallocate(block);
  EXPECT_EQ(a->stats().in_use_bytes, 0u);
}

}  // namespace
}  // namespace plimsoll
