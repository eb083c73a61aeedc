// plimsoll::step() from one thread while others allocate, free, and create and destroy devices: the step
// listeners' registry and each device's lock (src/engine/step_listeners.hpp) under TSan.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "backings/sim_backing.hpp"
#include "plimsoll/allocator.hpp"
#include "plimsoll/device.hpp"
#include "plimsoll/recording.hpp"
#include "plimsoll/stats.hpp"

namespace plimsoll {
namespace {

constexpr std::uint64_t MiB = 1ull << 20;

std::unique_ptr<Allocator> sim_device(std::uint64_t limit) {
  DeviceDescription description;
  description.name = "sim:1GiB";
  description.hardware = "simulated device";
  description.total_bytes = 1ull << 30;
  description.limit_bytes = limit;
  return std::make_unique<Allocator>(description, std::make_unique<backings::SimBacking>(1ull << 30));
}

TEST(ThreadsStepPlan, StepsWhileThreadsAllocateAndDevicesComeAndGo) {
  auto shared = sim_device(512 * MiB);
  // A fixed amount of work, so a step's packing cost (up to the square of its requests) stays bounded however the
  // threads are scheduled; steps are announced until the work is done, and at least 200 times.
  constexpr int kOperationsPerWorker = 20'000;
  std::atomic<int> allocating{2};
  std::vector<std::thread> workers;
  for (int t = 0; t < 2; ++t) {
    workers.emplace_back([&, t] {
      std::vector<void*> held;
      for (int i = 0; i < kOperationsPerWorker; ++i) {
        held.push_back(shared->allocate(static_cast<std::size_t>((i % 7 + 1 + t) * 256 * 1024)));
        if (held.size() > 8) {
          shared->deallocate(held.front());
          held.erase(held.begin());
        }
      }
      for (void* block : held) shared->deallocate(block);
      --allocating;
    });
  }
  workers.emplace_back([&] {  // devices made and destroyed while steps are announced
    while (allocating.load() > 0) {
      auto device = sim_device(64 * MiB);
      void* block = device->allocate(3 * MiB);
      device->deallocate(block);
    }
  });
  std::uint64_t announced = 0;
  for (; announced < 200 || allocating.load() > 0; ++announced) plimsoll::step();
  for (std::thread& worker : workers) worker.join();
  const Stats stats = shared->stats();
  EXPECT_EQ(stats.step_plan.steps, announced);
  EXPECT_EQ(stats.in_use_bytes, 0u);
  EXPECT_EQ(stats.live_allocations, 0u);
}

}  // namespace
}  // namespace plimsoll
