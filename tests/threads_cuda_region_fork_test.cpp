// fork() beside the CUDA region backing's leaf locks (src/backings/cuda_leaf_locks.hpp): its last driver error is
// read without the device's or the backing's lock, so a thread may be inside that note's lock at any fork. The
// region backing takes it at the fork as the VMM and pinned-host backings do (the error's lock, then the events'),
// or a child whose parent forked while a reader held it would hang at its first read. Over the fake CUDA driver: no
// GPU needed. A reader thread reads the note in a loop while the main thread forks again and again; each child reads
// the note and allocates through the device, and must exit cleanly in time (fork_child.hpp).
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "backings/cuda_region_backing.hpp"
#include "fake_cuda_driver.hpp"
#include "fork_child.hpp"
#include "plimsoll/allocator.hpp"

namespace plimsoll {
namespace {

constexpr std::uint64_t MiB = std::uint64_t{1} << 20;

TEST(ThreadsCudaRegionFork, ForkWhileAnotherThreadReadsTheDriverErrorLeavesAWorkingChild) {
  fake_cuda::Options options;
  options.capacity_bytes = 256 * MiB;
  fake_cuda::Driver driver(options);
  auto owned = std::make_unique<backings::CudaRegionBacking>(driver.api(), 0);
  backings::CudaRegionBacking& backing = *owned;
  driver.fail(fake_cuda::Call::mem_alloc, 1, cuda_driver::kErrorInvalidValue);
  ASSERT_EQ(backing.reserve(4 * MiB), 0U);
  ASSERT_NE(backing.last_driver_error(), "") << "a kept error: the reader copies it under the note's lock";

  DeviceDescription description;
  description.name = "cuda:0";
  description.hardware = "Fake GPU (memfd)";
  description.policy.growth = Growth::preallocate;
  description.limit_bytes = 32 * MiB;
  description.total_bytes = options.capacity_bytes;
  Allocator device(description, std::move(owned));

  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> reads{0};
  std::thread reader([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      (void)backing.last_driver_error();
      reads.fetch_add(1, std::memory_order_relaxed);
    }
  });
  while (reads.load() == 0) std::this_thread::yield();

  std::string problem;
  for (int fork_count = 0; fork_count < 32 && problem.empty(); ++fork_count) {
    problem = fork_test::run_in_child([&] {
      if (backing.last_driver_error().find("cuMemAlloc") == std::string::npos) return 2;
      void* p = device.try_allocate(1 * MiB);
      if (p == nullptr) return 3;
      device.deallocate(p);
      return 0;
    });
  }
  stop = true;
  reader.join();
  EXPECT_EQ(problem, "") << "the note's lock, held at the fork by a thread that does not exist in the child";
  EXPECT_EQ(device.stats().live_allocations, 0U);
}

}  // namespace
}  // namespace plimsoll
