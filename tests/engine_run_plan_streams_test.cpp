// A run plan on a stream-ordered (CUDA) device (docs/engine.md, "Run plans", where it sits): a block freed on a
// stream whose queued work still uses it is parked, live in the heap, until its event completes. A plan packed from
// a trace places a later request in that block's bytes. When the request comes on the stream the block was freed
// on, stream order makes the bytes its own at once (the later work runs after the work that used them), so the
// parked parts inside the planned range are freed into the heap and the request placed there: the plan goes on
// (StreamOrder::unpark_range). A block parked on another stream (or also used on another one, record_stream) whose
// work is pending still holds its range: the plan ends `occupied` there, the request takes the normal path, and
// nothing another stream may still use is handed out. A block whose work completed is back in the heap already.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

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

// `entries` (size, offset) under a 32 MiB limit, 2 MiB granules.
engine::RunPlan plan_of(const std::vector<engine::RunPlan::Entry>& entries) {
  engine::RunPlan plan;
  plan.granule = 2 * MiB;
  plan.limit = 32 * MiB;
  plan.source = "streams.plan";
  plan.entries = entries;
  for (const engine::RunPlan::Entry& entry : entries) plan.fingerprint.push_back(entry.size);
  plan.covered_granules = engine::count_covered_granules(entries, plan.granule);
  return plan;
}

// Three 4 MiB requests, each at offset 0: every one reuses the bytes of the one before, freed in between.
engine::RunPlan same_range_plan() { return plan_of({{4 * MiB, 0}, {4 * MiB, 0}, {4 * MiB, 0}}); }

std::uintptr_t at(void* p) { return reinterpret_cast<std::uintptr_t>(p); }

TEST(EngineRunPlanStreams, ABlockParkedOnTheRequestingStreamIsTakenAndThePlanGoesOn) {
  fake_cuda::Driver driver;
  auto device = fake_cuda_allocator(driver, 32 * MiB);
  fake_cuda::Stream& a = driver.create_stream();
  ASSERT_EQ(RunPlanLoader::install(*device, same_range_plan()), "");
  void* first = device->allocate(4 * MiB, on(a));
  a.hold();
  a.launch();  // a kernel on `a` still uses `first` (the host runs ahead of the GPU, as in training)
  device->deallocate(first, on(a));
  EXPECT_EQ(device->stats().parked_bytes, 4 * MiB);
  void* second = device->allocate(4 * MiB, on(a));  // planned at `first`'s range, still parked on `a`
  EXPECT_EQ(second, first) << "placed at the plan's address: `a`'s later work runs after the work that used it";
  device->deallocate(second, on(a));
  void* third = device->allocate(4 * MiB, on(a));
  EXPECT_EQ(third, first);
  Stats stats = device->stats();
  EXPECT_TRUE(stats.run_plan.active());
  EXPECT_EQ(stats.run_plan.ended_by, End::none);
  EXPECT_EQ(stats.run_plan.placed, 3u);
  EXPECT_EQ(stats.run_plan.unparked, 2u);
  EXPECT_EQ(stats.parked_bytes, 0u);
  EXPECT_EQ(stats.in_use_bytes, 4 * MiB);
  EXPECT_EQ(stats.reserved_bytes, 4 * MiB) << "the plan's two granules, nothing more";
  EXPECT_EQ(stats.stream_fallbacks, 0u) << "no device synchronization";
  a.release();
  device->deallocate(third, on(a));
  stats = device->stats();
  EXPECT_EQ(stats.in_use_bytes, 0u);
}

TEST(EngineRunPlanStreams, ABlockParkedOnAnotherStreamWithPendingWorkEndsThePlanOccupied) {
  fake_cuda::Driver driver;
  auto device = fake_cuda_allocator(driver, 32 * MiB);
  fake_cuda::Stream& a = driver.create_stream();
  fake_cuda::Stream& b = driver.create_stream();
  ASSERT_EQ(RunPlanLoader::install(*device, same_range_plan()), "");
  void* first = device->allocate(4 * MiB, on(b));
  b.hold();
  b.launch();  // a kernel on `b` still uses `first`
  device->deallocate(first, on(b));
  void* second = device->allocate(4 * MiB, on(a));  // planned at `first`'s range: `a` must not take it
  ASSERT_NE(second, nullptr) << "the request itself is served, by the normal path";
  EXPECT_NE(second, first);
  EXPECT_TRUE(at(second) >= at(first) + 4 * MiB || at(second) + 4 * MiB <= at(first)) << "no byte of `first`";
  Stats stats = device->stats();
  EXPECT_FALSE(stats.run_plan.active());
  EXPECT_EQ(stats.run_plan.ended_by, End::occupied);
  EXPECT_EQ(stats.run_plan.ended_at, 1u);
  EXPECT_EQ(stats.run_plan.placed, 1u);
  EXPECT_EQ(stats.run_plan.unparked, 0u);
  EXPECT_EQ(stats.parked_bytes, 4 * MiB) << "still parked behind `b`'s event";
  EXPECT_EQ(stats.in_use_bytes, 4 * MiB);
  b.release();
  device->deallocate(second, on(a));
  stats = device->stats();
  EXPECT_EQ(stats.in_use_bytes, 0u);
}

TEST(EngineRunPlanStreams, ABlockAlsoUsedOnAnotherStreamEndsThePlanOccupied) {
  fake_cuda::Driver driver;
  auto device = fake_cuda_allocator(driver, 32 * MiB);
  fake_cuda::Stream& a = driver.create_stream();
  fake_cuda::Stream& b = driver.create_stream();
  ASSERT_EQ(RunPlanLoader::install(*device, same_range_plan()), "");
  void* first = device->allocate(4 * MiB, on(a));
  device->record_stream(first, on(b));
  b.hold();
  b.launch();  // `b`'s work on `first` is pending: freed on `a`, it waits for `b` too
  device->deallocate(first, on(a));
  void* second = device->allocate(4 * MiB, on(a));
  EXPECT_NE(second, first);
  const Stats stats = device->stats();
  EXPECT_EQ(stats.run_plan.ended_by, End::occupied);
  EXPECT_EQ(stats.run_plan.placed, 1u);
  EXPECT_EQ(stats.parked_bytes, 4 * MiB);
  b.release();
  device->deallocate(second, on(a));
}

TEST(EngineRunPlanStreams, ABlockWhoseWorkCompletedIsBackInTheHeapAndThePlanGoesOn) {
  fake_cuda::Driver driver;
  auto device = fake_cuda_allocator(driver, 32 * MiB);
  fake_cuda::Stream& a = driver.create_stream();
  fake_cuda::Stream& b = driver.create_stream();
  ASSERT_EQ(RunPlanLoader::install(*device, same_range_plan()), "");
  void* first = device->allocate(4 * MiB, on(b));
  device->deallocate(first, on(b));  // no work queued on `b`: its event completes at once
  void* second = device->allocate(4 * MiB, on(a));  // another stream: fine once `b`'s work completed
  EXPECT_EQ(second, first) << "placed at the plan's address";
  const Stats stats = device->stats();
  EXPECT_TRUE(stats.run_plan.active());
  EXPECT_EQ(stats.run_plan.placed, 2u);
  EXPECT_EQ(stats.run_plan.unparked, 0u) << "released by the poll, not taken early";
  EXPECT_EQ(stats.parked_bytes, 0u);
  device->deallocate(second, on(a));
}

// A parked block wider than the planned range: only the part inside is taken, the rest stays parked behind the
// same event, and the next request planned there takes it in turn.
TEST(EngineRunPlanStreams, OnlyTheRangesPartOfAWiderParkedBlockIsTaken) {
  fake_cuda::Driver driver;
  auto device = fake_cuda_allocator(driver, 32 * MiB);
  fake_cuda::Stream& a = driver.create_stream();
  ASSERT_EQ(RunPlanLoader::install(*device, plan_of({{8 * MiB, 0}, {4 * MiB, 4 * MiB}, {4 * MiB, 0}})), "");
  void* first = device->allocate(8 * MiB, on(a));
  a.hold();
  a.launch();
  device->deallocate(first, on(a));
  void* upper = device->allocate(4 * MiB, on(a));  // the part above the range's start: the lower part stays
  EXPECT_EQ(at(upper), at(first) + 4 * MiB);
  Stats stats = device->stats();
  EXPECT_EQ(stats.parked_bytes, 4 * MiB);
  EXPECT_EQ(stats.in_use_bytes, 4 * MiB);
  void* lower = device->allocate(4 * MiB, on(a));
  EXPECT_EQ(lower, first);
  stats = device->stats();
  EXPECT_TRUE(stats.run_plan.active());
  EXPECT_EQ(stats.run_plan.placed, 3u);
  EXPECT_EQ(stats.run_plan.unparked, 2u);
  EXPECT_EQ(stats.parked_bytes, 0u);
  EXPECT_EQ(stats.in_use_bytes, 8 * MiB);
  EXPECT_EQ(stats.reserved_bytes, 8 * MiB);
  a.release();
  device->deallocate(upper, on(a));
  device->deallocate(lower, on(a));
}

// The planned range starts at a parked block and goes on past it: the part above it (the block's upper half is
// not in the range, the next free bytes are) is placed with it; a wider block's part above the range stays parked.
TEST(EngineRunPlanStreams, ARangePartlyParkedAndPartlyFreeIsPlaced) {
  fake_cuda::Driver driver;
  auto device = fake_cuda_allocator(driver, 32 * MiB);
  fake_cuda::Stream& a = driver.create_stream();
  ASSERT_EQ(RunPlanLoader::install(*device, plan_of({{4 * MiB, 0}, {8 * MiB, 0}, {2 * MiB, 0}})), "");
  void* first = device->allocate(4 * MiB, on(a));
  a.hold();
  a.launch();
  device->deallocate(first, on(a));
  void* second = device->allocate(8 * MiB, on(a));  // [0, 4) parked on `a`, [4, 8) free
  EXPECT_EQ(second, first);
  device->deallocate(second, on(a));
  void* third = device->allocate(2 * MiB, on(a));  // the lower part of the 8 MiB block, parked: the rest stays
  EXPECT_EQ(third, first);
  Stats stats = device->stats();
  EXPECT_TRUE(stats.run_plan.active());
  EXPECT_EQ(stats.run_plan.placed, 3u);
  EXPECT_EQ(stats.run_plan.unparked, 2u);
  EXPECT_EQ(stats.parked_bytes, 6 * MiB);
  EXPECT_EQ(stats.in_use_bytes, 2 * MiB);
  a.release();
  device->deallocate(third, on(a));
  void* after = device->allocate(4 * MiB, on(a));  // the plan finished; the rest came back when `a`'s work did
  stats = device->stats();
  EXPECT_EQ(stats.parked_bytes, 0u);
  EXPECT_EQ(stats.in_use_bytes, 4 * MiB);
  device->deallocate(after, on(a));
}

// Bytes freed from a parked block for a planned range that then cannot be placed after all (a live block in the
// rest of it): nobody may take them while the stream's work may still use them, so the device is synchronized
// before the request goes on, by the normal path.
TEST(EngineRunPlanStreams, BytesFreedForARangeThatStaysOccupiedWaitForTheDevice) {
  fake_cuda::Driver driver;
  auto device = fake_cuda_allocator(driver, 32 * MiB);
  fake_cuda::Stream& a = driver.create_stream();
  ASSERT_EQ(RunPlanLoader::install(*device, plan_of({{4 * MiB, 0}, {4 * MiB, 4 * MiB}, {8 * MiB, 0}})), "");
  void* first = device->allocate(4 * MiB, on(a));
  void* second = device->allocate(4 * MiB, on(a));
  ASSERT_EQ(at(second), at(first) + 4 * MiB);
  a.hold();
  a.launch();
  device->deallocate(first, on(a));
  std::atomic<void*> third{nullptr};
  std::atomic<bool> returned{false};
  std::thread request([&] {
    third = device->allocate(8 * MiB, on(a));  // planned over `first` (parked on `a`) and `second` (live)
    returned = true;
  });
  while (!driver.synchronizing() && !returned.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_FALSE(returned.load()) << "waits for `a`'s work before anyone may take `first`'s bytes";
  a.release();
  request.join();
  ASSERT_NE(third.load(), nullptr);
  const Stats stats = device->stats();
  EXPECT_EQ(stats.run_plan.ended_by, End::occupied);
  EXPECT_EQ(stats.run_plan.ended_at, 2u);
  EXPECT_EQ(stats.run_plan.placed, 2u);
  EXPECT_EQ(stats.run_plan.unparked, 0u);
  EXPECT_EQ(stats.stream_fallbacks, 1u);
  EXPECT_EQ(stats.parked_bytes, 0u);
  EXPECT_EQ(stats.in_use_bytes, 12 * MiB);
  device->deallocate(second, on(a));
  device->deallocate(third.load(), on(a));
}

}  // namespace
}  // namespace plimsoll
