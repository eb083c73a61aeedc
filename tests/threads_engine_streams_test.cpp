// Stream-ordered reuse from many threads (run under TSan by the threads label): each thread allocates and frees
// on its own fake stream, sometimes holding the stream busy over a batch of frees. A block freed on a held
// stream may go back to the thread that owns that stream (stream order), but never to another thread before the
// stream is released. A last phase has threads run out of memory while another thread's stream holds the
// memory, and wait for it.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "fake_cuda_device.hpp"

namespace plimsoll {
namespace {

using fake_cuda::fake_cuda_allocator;
using fake_cuda::on;
constexpr std::size_t MiB = std::size_t{1} << 20;

TEST(EngineStreamsThreads, NoBlockGoesToAnotherStreamWhileTheStreamThatFreedItIsBusy) {
  fake_cuda::Driver driver(fake_cuda::Options{.capacity_bytes = 256 * MiB});
  auto allocator = fake_cuda_allocator(driver, 64 * MiB);

  constexpr int kThreads = 4;
  constexpr int kRounds = 300;
  std::vector<fake_cuda::Stream*> streams;
  for (int i = 0; i < kThreads; ++i) streams.push_back(&driver.create_stream());

  std::mutex busy_mutex;
  std::map<std::uintptr_t, std::pair<std::uintptr_t, int>> busy;  // start -> (end, owner): freed on a held stream
  std::atomic<int> violations{0};
  std::atomic<int> failures{0};

  auto worker = [&](int index) {
    std::mt19937 random(static_cast<unsigned>(index) * 7919u + 1u);
    fake_cuda::Stream& stream = *streams[static_cast<std::size_t>(index)];
    std::vector<std::pair<void*, std::size_t>> live;
    for (int round = 0; round < kRounds; ++round) {
      const int batch = 1 + static_cast<int>(random() % 4);
      for (int i = 0; i < batch; ++i) {
        const std::size_t bytes = 256 + random() % (256 * 1024);
        void* ptr = allocator->try_allocate(bytes, on(stream));
        if (ptr == nullptr) {
          failures.fetch_add(1);
          continue;
        }
        {
          const std::lock_guard lock(busy_mutex);
          const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
          for (const auto& [start, range] : busy)
            if (start < addr + bytes && addr < range.first && range.second != index) violations.fetch_add(1);
        }
        std::memset(ptr, index, 64);  // the fake maps real memory: touch it like a kernel would
        live.emplace_back(ptr, bytes);
      }
      const bool hold = random() % 3 == 0;
      std::vector<std::uintptr_t> parked_here;
      if (hold) {
        stream.hold();
        stream.launch();
      }
      while (!live.empty() && (live.size() > 8 || random() % 2 == 0)) {
        const auto [ptr, bytes] = live.back();
        live.pop_back();
        if (hold) {
          const std::lock_guard lock(busy_mutex);
          const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
          busy[addr] = {addr + bytes, index};
          parked_here.push_back(addr);
        }
        allocator->deallocate(ptr, on(stream));
      }
      if (hold) {
        std::this_thread::yield();  // let the other threads allocate while these frees are parked
        {
          const std::lock_guard lock(busy_mutex);
          for (std::uintptr_t addr : parked_here) busy.erase(addr);
        }
        stream.release();  // only now may the parked blocks go to other streams
      }
    }
    for (const auto& [ptr, bytes] : live) allocator->deallocate(ptr, on(stream));
  };

  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) threads.emplace_back(worker, i);
  for (std::thread& thread : threads) thread.join();

  EXPECT_EQ(violations.load(), 0);
  EXPECT_EQ(failures.load(), 0);
  allocator->trim();
  const Stats stats = allocator->stats();
  EXPECT_EQ(stats.parked_bytes, 0u);
  EXPECT_EQ(stats.in_use_bytes, 0u);
  EXPECT_EQ(driver.mapped_bytes(), 0u);
  EXPECT_LE(driver.counters().event_create, static_cast<std::uint64_t>(kThreads * 16)) << "events are pooled";
}

TEST(EngineStreamsThreads, ThreadsOutOfMemoryWaitForAnotherStreamsParkedBlocks) {
  fake_cuda::Driver driver(fake_cuda::Options{.capacity_bytes = 256 * MiB});
  auto allocator = fake_cuda_allocator(driver, 16 * MiB);
  fake_cuda::Stream& holder = driver.create_stream();
  void* big = allocator->allocate(14 * MiB, on(holder));
  holder.hold();
  holder.launch();
  allocator->deallocate(big, on(holder));

  std::atomic<int> done{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&] {
      fake_cuda::Stream& mine = driver.create_stream();
      void* ptr = allocator->allocate(4 * MiB, on(mine));  // only fits once `big` is back
      std::memset(ptr, 1, 4096);
      done.fetch_add(1);
      allocator->deallocate(ptr, on(mine));
    });
  }
  while (driver.counters().event_query < 64) std::this_thread::yield();  // they are waiting
  EXPECT_EQ(done.load(), 0) << "an allocation got memory still parked on a busy stream";
  holder.release();
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(done.load(), 3);
  EXPECT_EQ(allocator->stats().ooms, 0u);
}

}  // namespace
}  // namespace plimsoll
