// Streams against the CUDA virtual memory backing, with the fake driver's streams (tests/fake_cuda_driver.hpp:
// a stream's work completes at once unless the test holds it). Threaded, so TSan runs it (label "threads"):
// trimming waits until every stream has finished before any granule is unmapped; events complete with the
// work queued before them; several threads allocating and freeing over one backing keep the driver's mapped
// bytes equal to the heap's.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "backings/cuda_vmm_backing.hpp"
#include "fake_cuda_driver.hpp"
#include "plimsoll/allocator.hpp"

namespace plimsoll::backings {
namespace {

namespace cu = cuda_driver;
constexpr std::uint64_t MiB = std::uint64_t{1} << 20;

std::unique_ptr<Allocator> allocator_over(const cu::Api& api, std::uint64_t limit) {
  DeviceDescription description;
  description.name = "cuda:0";
  description.hardware = "Fake GPU (memfd)";
  description.policy.growth = Growth::on_demand;
  description.limit_bytes = limit;
  description.total_bytes = limit;
  return std::make_unique<Allocator>(description, std::make_unique<CudaVmmBacking>(api, 0));
}

void wait_until(const std::function<bool()>& condition) {
  while (!condition()) std::this_thread::yield();
}

TEST(CudaStreams, TrimUnmapsNothingUntilEveryStreamHasFinished) {
  fake_cuda::Driver driver;
  fake_cuda::Stream& idle = driver.create_stream();
  fake_cuda::Stream& busy = driver.create_stream();
  auto allocator = allocator_over(driver.api(), 32 * MiB);
  void* block = allocator->allocate(6 * MiB);
  std::memset(block, 1, 6 * MiB);
  // A kernel on `busy` still reads the block when the program frees it (PyTorch frees at once and lets the
  // stream order the rest); the memory may be reused by later work on the stream, but not unmapped.
  idle.launch();
  busy.hold();
  busy.launch();
  allocator->deallocate(block);

  std::atomic<std::uint64_t> trimmed{0};
  std::thread trimmer([&] { trimmed = allocator->trim(); });
  wait_until([&] { return driver.synchronizing(); });
  EXPECT_EQ(driver.counters().unmap, 0U) << "the busy stream may still touch the granules";
  EXPECT_EQ(driver.counters().release, 0U);
  EXPECT_GT(driver.mapped_bytes(), 0U);

  busy.release();
  trimmer.join();
  EXPECT_GE(trimmed.load(), 6 * MiB);
  EXPECT_GT(driver.counters().unmap, 0U);
  EXPECT_EQ(driver.mapped_bytes(), 0U);
  EXPECT_EQ(driver.used_bytes(), 0U);
}

TEST(CudaStreams, EventsCompleteWithTheWorkQueuedBeforeThem) {
  fake_cuda::Driver driver;
  const cu::Api& api = driver.api();
  fake_cuda::Stream& stream = driver.create_stream();
  cu::Event never_recorded = nullptr;
  cu::Event before = nullptr;
  cu::Event pending = nullptr;
  ASSERT_EQ(api.event_create(&never_recorded, cu::kEventDisableTiming), cu::kSuccess);
  ASSERT_EQ(api.event_create(&before, cu::kEventDisableTiming), cu::kSuccess);
  ASSERT_EQ(api.event_create(&pending, cu::kEventDisableTiming), cu::kSuccess);
  EXPECT_EQ(api.event_query(never_recorded), cu::kSuccess) << "as on the real driver";

  stream.launch();
  ASSERT_EQ(api.event_record(before, stream.handle()), cu::kSuccess);
  stream.hold();
  stream.launch();
  ASSERT_EQ(api.event_record(pending, stream.handle()), cu::kSuccess);
  EXPECT_EQ(api.event_query(before), cu::kSuccess) << "its work finished before the stream was held";
  EXPECT_EQ(api.event_query(pending), cu::kErrorNotReady);

  std::thread releaser([&] { stream.release(); });
  releaser.join();
  EXPECT_EQ(api.event_query(pending), cu::kSuccess);
  for (cu::Event event : {never_recorded, before, pending}) EXPECT_EQ(api.event_destroy(event), cu::kSuccess);
  EXPECT_EQ(api.event_destroy(pending), fake_cuda::kErrorInvalidHandle) << "a double destroy";
}

TEST(CudaStreams, ThreadsAllocatingOverOneBackingKeepTheBooksEqual) {
  fake_cuda::Options options;
  options.capacity_bytes = 128 * MiB;
  fake_cuda::Driver driver(options);
  auto allocator = allocator_over(driver.api(), 96 * MiB);
  constexpr int kThreads = 4;
  std::vector<std::thread> threads;
  std::atomic<int> corrupted{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      fake_cuda::Stream& stream = driver.create_stream();
      std::vector<std::pair<unsigned char*, std::size_t>> mine;
      for (int i = 0; i < 300; ++i) {
        const std::size_t size = (std::size_t{1} << (10 + (i * 7 + t) % 13)) + static_cast<std::size_t>(t);
        auto* data = static_cast<unsigned char*>(allocator->try_allocate(size));
        if (data != nullptr) {
          data[0] = static_cast<unsigned char>(t);
          data[size - 1] = static_cast<unsigned char>(t);
          mine.emplace_back(data, size);
        }
        stream.launch();
        if (mine.size() > 6 || (i % 5 == 4 && !mine.empty())) {
          auto [oldest, bytes] = mine.front();
          if (oldest[0] != t || oldest[bytes - 1] != t) ++corrupted;
          allocator->deallocate(oldest);
          mine.erase(mine.begin());
        }
        if (i % 50 == 49) allocator->trim();
      }
      for (auto [data, bytes] : mine) allocator->deallocate(data);
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(corrupted.load(), 0) << "a block's memory changed while it was live";
  EXPECT_EQ(driver.mapped_bytes(), allocator->usage().reserved_bytes);
  allocator->trim();
  EXPECT_EQ(driver.mapped_bytes(), 0U);
  const fake_cuda::Counters counters = driver.counters();
  EXPECT_EQ(counters.ctx_push, counters.ctx_pop);
}

}  // namespace
}  // namespace plimsoll::backings
