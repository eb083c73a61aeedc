// StreamOrderedFrees from many threads (run under TSan by the threads label): each thread allocates and frees
// on its own fake stream, sometimes holding the stream busy over a batch of frees. A block freed on a held
// stream must never be handed out, to any thread, before that stream is released.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "backings/cuda_vmm_backing.hpp"
#include "fake_cuda_driver.hpp"
#include "integrations/torch_cuda/stream_ordered_frees.hpp"
#include "plimsoll/allocator.hpp"

namespace plimsoll::torch_cuda {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

TEST(StreamOrderedFreesThreads, NoBlockIsReusedWhileTheStreamThatFreedItIsBusy) {
  fake_cuda::Driver driver(fake_cuda::Options{.capacity_bytes = 256 * MiB});
  auto backing = std::make_unique<backings::CudaVmmBacking>(driver.api(), 0);
  DeviceDescription description;
  description.name = "cuda:0";
  description.hardware = "Fake GPU (memfd)";
  description.policy.growth = Growth::on_demand;
  description.limit_bytes = 64 * MiB;
  description.total_bytes = backing->memory().total_bytes;
  Allocator allocator(description, std::move(backing));
  StreamOrderedFrees frees(allocator, driver.api());

  constexpr int kThreads = 4;
  constexpr int kRounds = 300;
  std::vector<fake_cuda::Stream*> streams;
  for (int i = 0; i < kThreads; ++i) streams.push_back(&driver.create_stream());

  std::mutex busy_mutex;
  std::set<void*> busy;  // freed on a stream that is held right now: must not be handed out
  std::atomic<int> violations{0};
  std::atomic<int> failures{0};

  auto worker = [&](int index) {
    std::mt19937 random(static_cast<unsigned>(index) * 7919u + 1u);
    fake_cuda::Stream& stream = *streams[static_cast<std::size_t>(index)];
    std::vector<void*> live;
    for (int round = 0; round < kRounds; ++round) {
      const int batch = 1 + static_cast<int>(random() % 4);
      for (int i = 0; i < batch; ++i) {
        const std::size_t bytes = 256 + random() % (256 * 1024);
        void* ptr = frees.allocate(bytes, stream.handle());
        if (ptr == nullptr) {
          failures.fetch_add(1);
          continue;
        }
        {
          const std::lock_guard lock(busy_mutex);
          if (busy.count(ptr) != 0) violations.fetch_add(1);
        }
        std::memset(ptr, index, 64);  // the fake maps real memory: touch it like a kernel would
        live.push_back(ptr);
      }
      const bool hold = random() % 3 == 0;
      std::vector<void*> parked_here;
      if (hold) {
        stream.hold();
        stream.launch();
      }
      while (!live.empty() && (live.size() > 8 || random() % 2 == 0)) {
        void* ptr = live.back();
        live.pop_back();
        if (hold) {
          const std::lock_guard lock(busy_mutex);
          busy.insert(ptr);
          parked_here.push_back(ptr);
        }
        if (!frees.deallocate(ptr, stream.handle())) failures.fetch_add(1);
      }
      if (hold) {
        std::this_thread::yield();  // let the other threads allocate while these frees are parked
        {
          const std::lock_guard lock(busy_mutex);
          for (void* ptr : parked_here) busy.erase(ptr);
        }
        stream.release();  // only now may the parked blocks be reused
      }
    }
    for (void* ptr : live)
      if (!frees.deallocate(ptr, stream.handle())) failures.fetch_add(1);
  };

  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) threads.emplace_back(worker, i);
  for (std::thread& thread : threads) thread.join();

  EXPECT_EQ(violations.load(), 0);
  EXPECT_EQ(failures.load(), 0) << frees.last_error();
  frees.drain_all();
  EXPECT_EQ(frees.parked(), 0u);
  EXPECT_EQ(allocator.usage().in_use_bytes, 0u);
  EXPECT_LE(frees.events_created(), static_cast<std::size_t>(kThreads * 16)) << "events are pooled";
}

}  // namespace
}  // namespace plimsoll::torch_cuda
