// StreamOrderedFrees (src/integrations/torch_cuda) over an Allocator on CudaVmmBacking and the fake driver
// (tests/fake_cuda_driver.hpp): a block freed on a busy stream is not handed out again until the stream's work
// completes, an allocation that would fail waits for parked frees first, events are pooled, bad frees refused.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>

#include "backings/cuda_vmm_backing.hpp"
#include "fake_cuda_driver.hpp"
#include "integrations/torch_cuda/stream_ordered_frees.hpp"
#include "plimsoll/allocator.hpp"

namespace plimsoll::torch_cuda {
namespace {

using ::testing::HasSubstr;
constexpr std::size_t MiB = std::size_t{1} << 20;

std::unique_ptr<Allocator> allocator_over(const cuda_driver::Api& api, std::uint64_t limit) {
  auto backing = std::make_unique<backings::CudaVmmBacking>(api, 0);
  DeviceDescription description;
  description.name = "cuda:0";
  description.hardware = "Fake GPU (memfd)";
  description.policy.growth = Growth::on_demand;
  description.limit_bytes = limit;
  description.total_bytes = backing->memory().total_bytes;
  return std::make_unique<Allocator>(description, std::move(backing));
}

TEST(StreamOrderedFrees, BlockFreedOnABusyStreamIsNotReusedUntilTheStreamCompletes) {
  fake_cuda::Driver driver;
  auto allocator = allocator_over(driver.api(), 32 * MiB);
  StreamOrderedFrees frees(*allocator, driver.api());
  fake_cuda::Stream& stream = driver.create_stream();

  void* first = frees.allocate(MiB, stream.handle());
  ASSERT_NE(first, nullptr);
  const std::uint64_t one_block = allocator->usage().in_use_bytes;

  stream.hold();
  stream.launch();  // a kernel still using `first`
  ASSERT_TRUE(frees.deallocate(first, stream.handle()));
  EXPECT_EQ(frees.parked(), 1u);
  EXPECT_EQ(allocator->usage().in_use_bytes, one_block) << "the allocator still counts the parked block";
  EXPECT_TRUE(allocator->owns(first));

  void* second = frees.allocate(MiB, stream.handle());
  ASSERT_NE(second, nullptr);
  EXPECT_NE(second, first) << "handed out while the stream's work may still use it";
  EXPECT_EQ(frees.drain_completed(), 0u);
  EXPECT_EQ(allocator->usage().in_use_bytes, 2 * one_block);

  stream.release();
  void* third = frees.allocate(MiB, stream.handle());  // drains the completed free first
  EXPECT_EQ(frees.parked(), 0u);
  EXPECT_EQ(third, first) << "the freed block (best fit) is reused once its event completed";
  EXPECT_EQ(allocator->usage().in_use_bytes, 2 * one_block);

  EXPECT_TRUE(frees.deallocate(second, stream.handle()));
  EXPECT_TRUE(frees.deallocate(third, stream.handle()));
  EXPECT_EQ(frees.drain_all(), 2u);
  EXPECT_EQ(allocator->usage().in_use_bytes, 0u);
  EXPECT_EQ(frees.last_error(), "");
}

TEST(StreamOrderedFrees, AllocationThatWouldFailWaitsForParkedFreesThenSucceeds) {
  fake_cuda::Driver driver;
  auto allocator = allocator_over(driver.api(), 4 * MiB);
  StreamOrderedFrees frees(*allocator, driver.api());
  fake_cuda::Stream& stream = driver.create_stream();

  void* all = frees.allocate(4 * MiB, stream.handle());
  ASSERT_NE(all, nullptr);
  stream.hold();
  stream.launch();
  ASSERT_TRUE(frees.deallocate(all, stream.handle()));

  std::thread finisher([&stream] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    stream.release();  // the kernel finishes while allocate() waits
  });
  void* again = frees.allocate(4 * MiB, stream.handle());
  finisher.join();
  ASSERT_NE(again, nullptr) << frees.last_error();
  EXPECT_EQ(again, all);
  EXPECT_EQ(frees.parked(), 0u);
  EXPECT_TRUE(frees.deallocate(again, stream.handle()));
}

TEST(StreamOrderedFrees, OutOfMemoryAfterWaitingKeepsPlimsollsReport) {
  fake_cuda::Driver driver;
  auto allocator = allocator_over(driver.api(), 4 * MiB);
  StreamOrderedFrees frees(*allocator, driver.api());
  fake_cuda::Stream& stream = driver.create_stream();

  void* held = frees.allocate(2 * MiB, stream.handle());
  void* parked = frees.allocate(2 * MiB, stream.handle());
  ASSERT_NE(held, nullptr);
  ASSERT_NE(parked, nullptr);
  ASSERT_TRUE(frees.deallocate(parked, stream.handle()));  // stream idle: completes at once
  EXPECT_EQ(frees.allocate(3 * MiB, stream.handle()), nullptr) << "2 MiB are still held: 3 MiB cannot fit";
  EXPECT_THAT(frees.last_error(), HasSubstr("out of memory on cuda:0"));
  EXPECT_EQ(frees.parked(), 0u);
  EXPECT_GE(allocator->stats().ooms, 1u);
  EXPECT_TRUE(frees.deallocate(held, stream.handle()));
}

TEST(StreamOrderedFrees, EventsArePooled) {
  fake_cuda::Driver driver;
  auto allocator = allocator_over(driver.api(), 32 * MiB);
  StreamOrderedFrees frees(*allocator, driver.api());
  fake_cuda::Stream& stream = driver.create_stream();
  for (int i = 0; i < 100; ++i) {
    void* ptr = frees.allocate(4096, stream.handle());
    ASSERT_NE(ptr, nullptr);
    ASSERT_TRUE(frees.deallocate(ptr, stream.handle()));
  }
  EXPECT_LE(frees.events_created(), 2u) << "each completed free's event is reused by the next";
}

TEST(StreamOrderedFrees, RefusesPointersItDoesNotOwnAndDoubleFrees) {
  fake_cuda::Driver driver;
  auto allocator = allocator_over(driver.api(), 32 * MiB);
  StreamOrderedFrees frees(*allocator, driver.api());
  fake_cuda::Stream& stream = driver.create_stream();
  int local = 0;
  EXPECT_FALSE(frees.deallocate(&local, stream.handle()));
  EXPECT_THAT(frees.last_error(), HasSubstr("invalid free"));

  void* ptr = frees.allocate(MiB, stream.handle());
  stream.hold();
  stream.launch();
  ASSERT_TRUE(frees.deallocate(ptr, stream.handle()));
  EXPECT_FALSE(frees.deallocate(ptr, stream.handle())) << "a second free of a parked block";
  EXPECT_EQ(frees.parked(), 1u);
  stream.release();
  EXPECT_EQ(frees.drain_all(), 1u);
  EXPECT_TRUE(frees.deallocate(nullptr, stream.handle()));
}

TEST(StreamOrderedFrees, WhenNoEventCanBeRecordedTheFreeWaitsForTheContextAndHappensAtOnce) {
  fake_cuda::Driver driver;
  auto allocator = allocator_over(driver.api(), 32 * MiB);
  StreamOrderedFrees frees(*allocator, driver.api());
  void* ptr = frees.allocate(MiB, nullptr);
  ASSERT_NE(ptr, nullptr);
  cuda_driver::Context context = nullptr;
  ASSERT_EQ(driver.api().primary_ctx_retain(&context, 0), cuda_driver::kSuccess);
  ASSERT_EQ(driver.api().ctx_push_current(context), cuda_driver::kSuccess);  // cuCtxSynchronize needs one
  const std::uint64_t synchronized_before = driver.counters().ctx_synchronize;
  EXPECT_TRUE(frees.deallocate(ptr, nullptr)) << "the fake refuses cuEventRecord on a null stream";
  EXPECT_EQ(driver.counters().ctx_synchronize, synchronized_before + 1);
  driver.api().ctx_pop_current(&context);
  driver.api().primary_ctx_release(0);
  EXPECT_EQ(frees.parked(), 0u);
  EXPECT_EQ(allocator->usage().in_use_bytes, 0u);
  EXPECT_THAT(frees.last_error(), HasSubstr("cuEventRecord failed"));
}

TEST(StreamOrderedFrees, DestructorWaitsForParkedFreesAndGivesThemBack) {
  fake_cuda::Driver driver;
  auto allocator = allocator_over(driver.api(), 32 * MiB);
  fake_cuda::Stream& stream = driver.create_stream();
  {
    StreamOrderedFrees frees(*allocator, driver.api());
    void* ptr = frees.allocate(MiB, stream.handle());
    stream.hold();
    stream.launch();
    ASSERT_TRUE(frees.deallocate(ptr, stream.handle()));
    stream.release();
  }
  EXPECT_EQ(allocator->usage().in_use_bytes, 0u);
}

}  // namespace
}  // namespace plimsoll::torch_cuda
