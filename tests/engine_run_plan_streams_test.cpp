// A run plan on a stream-ordered (CUDA) device (docs/engine.md, "Run plans", where it sits): a block freed on a
// stream whose queued work still uses it is parked, live in the heap, until its event completes. While the plan is
// active no request reuses parked blocks, so a plan that places a later request in that block's range (as a packer
// reusing a dead block's bytes does) finds it occupied and ends there, for good: the request and the rest take the
// normal path. Once the work completed the block is back in the heap and the plan goes on. These tests hold that
// documented behaviour (a fix would unpark the blocks covering the planned range instead).
#include <cstdint>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "engine/heap.hpp"
#include "engine/run_plan.hpp"
#include "engine/run_plan_follower.hpp"
#include "fake_cuda_device.hpp"
#include "plimsoll/allocator.hpp"

namespace plimsoll {
namespace {

using End = RunPlanStats::End;
using fake_cuda::fake_cuda_allocator;
using fake_cuda::on;

constexpr std::uint64_t MiB = 1ull << 20;

// Three 4 MiB requests, each at offset 0: every one reuses the bytes of the one before, freed in between.
engine::RunPlan same_range_plan() {
  engine::RunPlan plan;
  plan.granule = 2 * MiB;
  plan.limit = 32 * MiB;
  plan.source = "same_range.plan";
  plan.entries = {{4 * MiB, 0}, {4 * MiB, 0}, {4 * MiB, 0}};
  plan.fingerprint = {4 * MiB, 4 * MiB, 4 * MiB};
  plan.covered_granules = 2;
  return plan;
}

TEST(EngineRunPlanStreams, ABlockParkedOnTheRequestingStreamEndsThePlanOccupied) {
  fake_cuda::Driver driver;
  auto device = fake_cuda_allocator(driver, 32 * MiB);
  fake_cuda::Stream& a = driver.create_stream();
  ASSERT_EQ(RunPlanLoader::install(*device, same_range_plan()), "");
  void* first = device->allocate(4 * MiB, on(a));
  a.hold();
  a.launch();  // a kernel on `a` still uses `first` (the host runs ahead of the GPU, as in training)
  device->deallocate(first, on(a));
  void* second = device->allocate(4 * MiB, on(a));  // planned at `first`'s range, still parked
  ASSERT_NE(second, nullptr) << "the request itself is served, by the normal path";
  EXPECT_NE(second, first);
  const Stats stats = device->stats();
  EXPECT_FALSE(stats.run_plan.active());
  EXPECT_EQ(stats.run_plan.ended_by, End::occupied);
  EXPECT_EQ(stats.run_plan.ended_at, 1u);
  EXPECT_EQ(stats.run_plan.placed, 1u);
  a.release();
  device->deallocate(second, on(a));
}

TEST(EngineRunPlanStreams, ABlockWhoseWorkCompletedIsBackInTheHeapAndThePlanGoesOn) {
  fake_cuda::Driver driver;
  auto device = fake_cuda_allocator(driver, 32 * MiB);
  fake_cuda::Stream& a = driver.create_stream();
  ASSERT_EQ(RunPlanLoader::install(*device, same_range_plan()), "");
  void* first = device->allocate(4 * MiB, on(a));
  device->deallocate(first, on(a));  // no work queued on `a`: its event completes at once
  void* second = device->allocate(4 * MiB, on(a));
  EXPECT_EQ(second, first) << "placed at the plan's address";
  const Stats stats = device->stats();
  EXPECT_TRUE(stats.run_plan.active());
  EXPECT_EQ(stats.run_plan.placed, 2u);
  device->deallocate(second, on(a));
}

}  // namespace
}  // namespace plimsoll
