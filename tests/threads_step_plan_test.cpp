// plimsoll::step() from one thread while others allocate, free, and create and destroy devices: the step
// listeners' registry and each device's lock (src/engine/step_listeners.hpp) under TSan.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <new>
#include <thread>
#include <vector>

#include "backings/sim_backing.hpp"
#include "engine/plan_follower.hpp"
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

// Packing runs off the device's lock: a pack that waits until another thread has allocated and freed on the same
// device finishes (were the lock held, the other thread could not, and the pack would give up after a minute and
// fail the test). The plan it made is stale then (the device changed while packing) and not followed; the next
// boundary, with nothing in between, installs one.
std::atomic<bool> pack_started{false};
std::atomic<bool> allocated_meanwhile{false};
std::atomic<bool> pack_waited_in_vain{false};

void wait_for_an_allocation() {
  pack_started = true;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  while (!allocated_meanwhile.load()) {
    if (std::chrono::steady_clock::now() > give_up) {
      pack_waited_in_vain = true;
      return;
    }
    std::this_thread::yield();
  }
}

TEST(ThreadsStepPlan, AllocationsGoOnWhileAStepIsPacked) {
  auto device = sim_device(512 * MiB);
  const auto one_step = [&] {
    std::vector<void*> held;
    for (int i = 0; i < 40; ++i) {
      held.push_back(device->allocate(static_cast<std::size_t>(static_cast<std::uint64_t>(i % 5 + 1) * MiB + 4096)));
      if (i % 3 == 2) {
        device->deallocate(held.front());
        held.erase(held.begin());
      }
    }
    for (void* block : held) device->deallocate(block);
  };
  device->step();  // observation starts
  one_step();
  engine::PackJob::while_packing = &wait_for_an_allocation;
  std::thread other([&] {
    while (!pack_started.load()) std::this_thread::yield();
    void* block = device->allocate(3 * MiB);  // takes the device's lock
    device->deallocate(block);
    allocated_meanwhile = true;
  });
  device->step();  // packs the observed step, waiting inside the pack for the other thread
  other.join();
  engine::PackJob::while_packing = nullptr;
  EXPECT_FALSE(pack_waited_in_vain.load()) << "the pack held the device's lock";
  Stats stats = device->stats();
  EXPECT_EQ(stats.step_plan.stale, 1u) << "the device changed while packing: that plan is not followed";
  EXPECT_EQ(stats.step_plan.plans, 0u);
  one_step();
  device->step();
  stats = device->stats();
  EXPECT_EQ(stats.step_plan.plans, 1u) << "a pack with nothing in between is installed";
  one_step();
  EXPECT_GT(device->stats().step_plan.followed, 0u);
  EXPECT_EQ(device->stats().in_use_bytes, 0u);
}

// Steps on one device from two threads at once while a third allocates: at most one pack is out at a time, and the
// device stays sound (TSan watches the copies the packs read).
TEST(ThreadsStepPlan, ConcurrentStepsAndAllocationsOnOneDevice) {
  auto device = sim_device(512 * MiB);
  std::atomic<bool> done{false};
  std::thread allocating([&] {
    std::vector<void*> held;
    for (int i = 0; i < 20'000; ++i) {
      held.push_back(device->allocate(static_cast<std::size_t>((i % 9 + 1) * 128 * 1024)));
      if (held.size() > 16) {
        device->deallocate(held.front());
        held.erase(held.begin());
      }
    }
    for (void* block : held) device->deallocate(block);
    done = true;
  });
  std::vector<std::thread> stepping;
  for (int t = 0; t < 2; ++t)
    stepping.emplace_back([&] {
      for (int s = 0; s < 100 || !done.load(); ++s) device->step();
    });
  allocating.join();
  for (std::thread& thread : stepping) thread.join();
  const Stats stats = device->stats();
  EXPECT_GE(stats.step_plan.steps, 200u);
  EXPECT_EQ(stats.in_use_bytes, 0u);
  EXPECT_EQ(stats.live_allocations, 0u);
}

void fail_to_pack() { throw std::bad_alloc(); }

// A pack that throws (out of host memory) is the plan's loss, not the program's: step() returns, the device goes on
// with best fit, and the next boundary packs again (a pack left marked as running would stop planning for good).
TEST(ThreadsStepPlan, APackThatThrowsLeavesBestFitAndTheNextBoundaryPacks) {
  auto device = sim_device(512 * MiB);
  const auto one_step = [&] {
    std::vector<void*> held;
    for (std::size_t i = 0; i < 30; ++i) held.push_back(device->allocate((i % 4 + 1) * MiB));
    for (void* block : held) device->deallocate(block);
  };
  device->step();
  one_step();
  engine::PackJob::while_packing = &fail_to_pack;
  EXPECT_NO_THROW(device->step());
  engine::PackJob::while_packing = nullptr;
  EXPECT_EQ(device->stats().step_plan.plans, 0u);
  one_step();
  device->step();
  EXPECT_EQ(device->stats().step_plan.plans, 1u) << "the boundary after a failed pack packs again";
  one_step();
  EXPECT_GT(device->stats().step_plan.followed, 0u);
  EXPECT_EQ(device->stats().in_use_bytes, 0u);
}

}  // namespace
}  // namespace plimsoll
