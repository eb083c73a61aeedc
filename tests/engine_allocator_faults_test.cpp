// A device's own path (no per-thread caches) when host memory runs out under its lock: try_allocate is noexcept, so
// a std::bad_alloc from the device's books (a new tag's counter, a step's observation) after the heap placed the
// block would be std::terminate. Failures are injected by replacing operator new in this test program
// (failing_operator_new.hpp); the tests skip under a sanitizer, whose runtime owns operator new.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "backings/backing_adaptor.hpp"
#include "backings/sim_backing.hpp"
#include "engine/heap.hpp"
#include "engine/plan_follower.hpp"
#include "plimsoll/allocator.hpp"
#include "plimsoll/oom.hpp"
#include "plimsoll/recording.hpp"

#include "failing_operator_new.hpp"
#include "sim_device.hpp"

namespace plimsoll {
namespace {

constexpr std::uint64_t MiB = 1ull << 20;

using testing_support::sim_device;

const TagStats* find_tag(const Stats& stats, const std::string& name) {
  const auto found = std::find_if(stats.tags.begin(), stats.tags.end(), [&](const TagStats& t) { return t.tag == name; });
  return found == stats.tags.end() ? nullptr : &*found;
}

TEST(EngineAllocatorFaults, ANewTagOutOfHostMemoryDeclinesBeforeTheHeapChanges) {
  SKIP_UNLESS_NEW_CAN_FAIL();
  Allocator device(sim_device(), std::make_unique<backings::SimBacking>(4ull << 30));
  device.set_step_plan(false);
  void* first = device.allocate(1 * MiB);  // the untagged counter exists; the next tag's does not
  const Tag tag = intern_tag("faults-new-tag-far-above-the-others");
  const Stats before = device.stats();
  void* refused = nullptr;
  {
    const ScopedFailures failing;
    refused = device.try_allocate(2 * MiB, tag);  // terminated here before: the counter grew after the heap placed it
  }
  EXPECT_EQ(refused, nullptr) << "no counter for the tag: the allocation declines";
  const Stats after = device.stats();
  EXPECT_EQ(after.live_allocations, before.live_allocations) << "declined before the heap changed anything";
  EXPECT_EQ(after.in_use_bytes, before.in_use_bytes);
  EXPECT_EQ(after.allocations, before.allocations);
  // With host memory again, the tag is counted as usual.
  void* p = device.allocate(2 * MiB, tag);
  const TagStats* counted = find_tag(device.stats(), "faults-new-tag-far-above-the-others");
  ASSERT_NE(counted, nullptr);
  EXPECT_EQ(counted->in_use_bytes, 2 * MiB);
  EXPECT_EQ(counted->allocations, 1u);
  device.deallocate(p);
  device.deallocate(first);
  EXPECT_EQ(device.stats().live_allocations, 0u);
}

// A device whose refused allocations are worth waiting for (as a shared GPU's): its wait gives the host its memory
// back, so a host failure taken for the device's retries and succeeds there.
class WaitingBacking final : public backings::OwningBackingAdaptor {
 public:
  WaitingBacking() : OwningBackingAdaptor("waiting", std::make_unique<backings::SimBacking>(4ull << 30)) {}
  int waits = 0;

 private:
  bool do_can_wait_for_memory() const noexcept override { return true; }
  void do_wait_for_memory() noexcept override {
    ++waits;
    t_fail_new = false;
  }
};

// allocate() (which throws) out of host memory for a new tag's counter: the host failed, not the device, so it
// throws std::bad_alloc rather than waiting for the device's memory and then reporting an OutOfMemory naming the
// device limit; it counts no device OOM.
TEST(EngineAllocatorFaults, ANewTagOutOfHostMemoryThrowsBadAllocNotADeviceOom) {
  SKIP_UNLESS_NEW_CAN_FAIL();
  auto owned = std::make_unique<WaitingBacking>();
  WaitingBacking& backing = *owned;
  Allocator device(sim_device(), std::move(owned));
  device.set_step_plan(false);
  void* first = device.allocate(1 * MiB);
  const Tag tag = intern_tag("faults-new-tag-throwing-far-above-the-others");
  const Stats before = device.stats();
  bool bad_alloc = false, device_oom = false;
  {
    const ScopedFailures failing;
    try {
      device.deallocate(device.allocate(2 * MiB, tag));
    } catch (const OutOfMemory&) {
      device_oom = true;
    } catch (const std::bad_alloc&) {
      bad_alloc = true;
    }
  }
  EXPECT_FALSE(device_oom) << "a host failure reported as the device's out-of-memory";
  EXPECT_TRUE(bad_alloc) << "a host failure treated as the device's (waited for, then retried)";
  EXPECT_EQ(backing.waits, 0);
  const Stats after = device.stats();
  EXPECT_EQ(after.ooms, before.ooms);
  EXPECT_EQ(after.live_allocations, before.live_allocations);
  // The device's own out-of-memory is still an OutOfMemory (waited for first), on the same thread right after.
  EXPECT_THROW((void)device.allocate(2ull << 30, tag), OutOfMemory);
  EXPECT_EQ(backing.waits, 1);
  void* p = device.allocate(2 * MiB, tag);
  device.deallocate(p);
  device.deallocate(first);
  EXPECT_EQ(device.stats().live_allocations, 0u);
}

// A device that waits for memory between its attempts (as a shared GPU does), with a seam there: the waiting thread
// parks until the test lets it go, its first attempt failed and its last not yet made.
class ParkingBacking final : public backings::OwningBackingAdaptor {
 public:
  ParkingBacking() : OwningBackingAdaptor("parking", std::make_unique<backings::SimBacking>(4ull << 30)) {}
  std::atomic<bool> parked{false}, go{false};

 private:
  bool do_can_wait_for_memory() const noexcept override { return true; }
  void do_wait_for_memory() noexcept override {
    parked.store(true);
    while (!go.load()) std::this_thread::yield();
  }
};

// Two threads fail on one device at once, for different reasons: one at the device limit (parked between its
// attempts), one out of host memory for a new tag's counter. Each failure path acts on the reason its own attempt
// returned: the host failure throws std::bad_alloc and counts no device OOM, the limit's throws OutOfMemory and is
// counted once. (A per-device field naming "the thread whose allocation failed for host memory" is shared by every
// thread failing meanwhile.)
TEST(EngineAllocatorFaults, TwoThreadsFailingAtOnceForDifferentReasonsEachGetTheirOwn) {
  SKIP_UNLESS_NEW_CAN_FAIL();
  auto owned = std::make_unique<ParkingBacking>();
  ParkingBacking& backing = *owned;
  Allocator device(sim_device(64 * MiB), std::move(owned));
  device.set_step_plan(false);
  void* first = device.allocate(1 * MiB);
  const Tag tag = intern_tag("faults-two-reasons-far-above-the-others");
  enum class Outcome { none, allocated, device_oom, bad_alloc, other };
  std::atomic<Outcome> at_limit{Outcome::none};
  std::thread over_the_limit([&] {
    try {
      device.deallocate(device.allocate(128 * MiB));
      at_limit = Outcome::allocated;
    } catch (const OutOfMemory&) {
      at_limit = Outcome::device_oom;
    } catch (const std::bad_alloc&) {
      at_limit = Outcome::bad_alloc;
    } catch (...) {
      at_limit = Outcome::other;
    }
  });
  while (!backing.parked.load()) std::this_thread::yield();  // its first attempt failed at the limit
  Outcome host = Outcome::none;
  {
    const ScopedFailures failing;
    try {
      device.deallocate(device.allocate(2 * MiB, tag));
      host = Outcome::allocated;
    } catch (const OutOfMemory&) {
      host = Outcome::device_oom;
    } catch (const std::bad_alloc&) {
      host = Outcome::bad_alloc;
    } catch (...) {
      host = Outcome::other;
    }
  }
  backing.go.store(true);
  over_the_limit.join();
  EXPECT_EQ(host, Outcome::bad_alloc) << "the host failure got another thread's reason";
  EXPECT_EQ(at_limit.load(), Outcome::device_oom) << "the limit's failure got another thread's reason";
  EXPECT_EQ(device.stats().ooms, 1u) << "the device's OOM counted once, the host's not at all";
  device.deallocate(first);
  EXPECT_EQ(device.stats().live_allocations, 0u);
}

// One allocation, two attempts, two reasons: the first (a new tag's counter) fails for host memory, then the
// per-thread caches are flushed and the last attempt, with host memory again, fails at the device limit. The
// failure path must act on the last attempt's reason: an OutOfMemory, counted. A per-device field set by the first
// attempt and still set after the last said std::bad_alloc.
TEST(EngineAllocatorFaults, TheLastAttemptsReasonIsTheOneReported) {
  SKIP_UNLESS_NEW_CAN_FAIL();
  Allocator device(sim_device(64 * MiB), std::make_unique<backings::SimBacking>(4ull << 30));
  device.set_step_plan(false);
  device.set_thread_cache(1 * MiB);
  device.deallocate(device.allocate(4096));
  const Tag tag = intern_tag("faults-last-reason-far-above-the-others");
  const std::uint64_t ooms_before = device.stats().ooms;
  bool bad_alloc = false, device_oom = false;
  t_fail_next_news = 1;  // the tag's counter, in the first attempt only
  try {
    device.deallocate(device.allocate(100 * MiB, tag));  // over the 64 MiB limit, inside the address space
  } catch (const OutOfMemory&) {
    device_oom = true;
  } catch (const std::bad_alloc&) {
    bad_alloc = true;
  }
  EXPECT_EQ(t_fail_next_news, 0) << "the first attempt asked for host memory";
  t_fail_next_news = 0;
  EXPECT_TRUE(device_oom) << "the last attempt failed at the device limit";
  EXPECT_FALSE(bad_alloc) << "the first attempt's host failure was reported for the last";
  EXPECT_EQ(device.stats().ooms, ooms_before + 1);
  EXPECT_EQ(device.stats().live_allocations, 0u);
}

// pause() turns the front off, flushes the thread caches, then pauses the heap. Out of host memory, the flush threw
// std::bad_alloc with `pausing` still set: the device was not paused, yet its front stayed off for good. Now the
// flush needs no host memory, and a pause whose flush throws turns the front back on: paused or not, once running
// the device's front serves (its first allocation takes a run from the heap, so the peak in use is over 1 KiB).
TEST(EngineAllocatorFaults, APauseOutOfHostMemoryLeavesTheFrontServing) {
  SKIP_UNLESS_NEW_CAN_FAIL();
  Allocator device(sim_device(256 * MiB), std::make_unique<backings::SimBacking>(4ull << 30));
  device.set_thread_cache(1 * MiB);
  device.deallocate(device.allocate(1024));
  {
    ScopedFailures failing;
    try {
      device.pause();
    } catch (const std::bad_alloc&) {
    }
  }
  if (device.paused()) device.resume();
  EXPECT_EQ(device.thread_cache(), 1 * MiB);
  device.trim();
  device.reset_peaks();
  void* block = device.allocate(1024);
  const std::uint64_t peak = device.stats().peak_in_use_bytes;
  device.deallocate(block);
  EXPECT_GT(peak, 1024u) << "the front does not serve after a pause out of host memory";
}

// The heap's own books (its live-address table, its block records) full: one more allocation needs them to grow,
// under the lock, inside the noexcept try_allocate. Out of host memory they are made room for before anything
// changes, so the allocation declines (nullptr; allocate() throws std::bad_alloc, not an OutOfMemory) with nothing
// changed or lost; it terminated before (the table grew after the block was taken out of the free bins).
TEST(EngineAllocatorFaults, TheHeapsBooksOutOfHostMemoryDeclineBeforeTheHeapChanges) {
  SKIP_UNLESS_NEW_CAN_FAIL();
  Allocator device(sim_device(), std::make_unique<backings::SimBacking>(4ull << 30));
  device.set_step_plan(false);
  // The live-address table starts at 1024 slots, kept at most half full: the 513th live block grows it.
  std::vector<void*> live;
  for (int i = 0; i < 512; ++i) live.push_back(device.allocate(4096));
  const Stats before = device.stats();
  void* refused = nullptr;
  bool bad_alloc = false, device_oom = false;
  {
    const ScopedFailures failing;
    refused = device.try_allocate(4096);
    try {
      live.push_back(device.allocate(4096));
    } catch (const OutOfMemory&) {
      device_oom = true;
    } catch (const std::bad_alloc&) {
      bad_alloc = true;
    }
  }
  EXPECT_EQ(refused, nullptr);
  EXPECT_TRUE(bad_alloc) << "the host's memory failed, not the device's";
  EXPECT_FALSE(device_oom);
  const Stats after = device.stats();
  EXPECT_EQ(after.live_allocations, before.live_allocations) << "declined before the heap changed anything";
  EXPECT_EQ(after.in_use_bytes, before.in_use_bytes);
  EXPECT_EQ(after.allocations, before.allocations);
  EXPECT_EQ(after.ooms, before.ooms);
  // With host memory again the books grow and the allocation is made as usual; every block frees.
  live.push_back(device.allocate(4096));
  for (void* p : live) device.deallocate(p);
  EXPECT_EQ(device.stats().live_allocations, 0u);
  EXPECT_EQ(device.stats().in_use_bytes, 0u);
}

// A recording attached: its first event of a tag defines the tag in the trace, inside the noexcept try_allocate.
// Out of host memory that must not throw (it was a vector's growth: std::terminate).
TEST(EngineAllocatorFaults, ARecordedNewTagOutOfHostMemoryDoesNotTerminate) {
  SKIP_UNLESS_NEW_CAN_FAIL();
  Allocator device(sim_device(), std::make_unique<backings::SimBacking>(4ull << 30));
  device.set_step_plan(false);
  const Tag tag = intern_tag("faults-recorded-tag-far-above-the-others");
  device.deallocate(device.allocate(1 * MiB, tag));  // the device's counter for the tag exists
  const std::string path = testing::TempDir() + "plimsoll_faults_recorded_tag.plimsoll";
  std::shared_ptr<Recording> recording = Recording::open(path);
  device.record_to(recording);
  void* p = nullptr;
  {
    const ScopedFailures failing;
    p = device.try_allocate(1 * MiB, tag);  // the recording's first event of this tag
  }
  if (p != nullptr) {
    EXPECT_GE(recording->events(), 1u);
    device.deallocate(p);
  }
  device.record_to(nullptr);
  recording->close();
  std::remove(path.c_str());
  EXPECT_EQ(device.stats().live_allocations, 0u);
}

TEST(EngineAllocatorFaults, AStepObservationOutOfHostMemoryLeavesTheStepUnobserved) {
  SKIP_UNLESS_NEW_CAN_FAIL();
  Allocator device(sim_device(), std::make_unique<backings::SimBacking>(4ull << 30));
  const Tag tag = intern_tag("faults-observed");
  device.deallocate(device.allocate(1 * MiB, tag));  // the tag's counter and the heap's books made
  device.step();  // the first boundary: the step from here on is observed
  void* observed = device.allocate(1 * MiB, tag);
  void* failed_observation = nullptr;
  {
    const ScopedFailures failing;
    // The heap places the block; recording it in the step's observation needs host memory. Before, the bad_alloc
    // left try_allocate (noexcept): std::terminate.
    failed_observation = device.try_allocate(1 * MiB, tag);
  }
  ASSERT_NE(failed_observation, nullptr) << "the heap placed it: the observation is what gives way";
  EXPECT_EQ(device.stats().live_allocations, 2u);
  {
    const ScopedFailures failing;
    device.deallocate(observed);  // the step is no longer observed: nothing to record, nothing thrown
  }
  device.deallocate(failed_observation);
  const Stats after = device.stats();
  EXPECT_EQ(after.live_allocations, 0u);
  const TagStats* counted = find_tag(after, "faults-observed");
  ASSERT_NE(counted, nullptr);
  EXPECT_EQ(counted->in_use_bytes, 0u);
  // Later steps are observed and planned as usual.
  for (int step = 0; step < 4; ++step) {
    device.step();
    void* a = device.allocate(1 * MiB, tag);
    void* b = device.allocate(3 * MiB, tag);
    device.deallocate(a);
    device.deallocate(b);
  }
  EXPECT_GT(device.stats().step_plan.followed, 0u) << "the steps after the unobserved one follow a plan";
}


// A planned request whose fixed placement declines for want of host memory (the heap's books cannot grow) is
// declined at once: it is not over the limit, and best fit needs the same books. Before, it counted `over_limit`,
// bumped the step's fallbacks and asked best fit, which declined again. The books are brought to their edge by
// small blocks placed far above the plan, in granules mapped beforehand, until one declines for host memory.
TEST(EngineAllocatorFaults, APlannedRequestOutOfHostMemoryDeclinesWithoutFallingBack) {
  SKIP_UNLESS_NEW_CAN_FAIL();
  backings::SimBacking sim(8ull << 30);
  engine::HeapOptions options;
  options.limit = 1ull << 30;
  engine::Heap heap(sim, options);
  engine::PlanFollower follower(heap);
  const auto step = [&] {
    const std::uint64_t a = follower.allocate(16 * MiB, 1), b = follower.allocate(16 * MiB, 1);
    ASSERT_NE(a, 0u);
    ASSERT_NE(b, 0u);
    for (const std::uint64_t addr : {a, b}) {
      engine::Heap::Freed freed;
      ASSERT_TRUE(heap.deallocate(addr, freed));
      follower.freed(addr, freed.size);
    }
  };
  const auto boundary = [&] {
    std::unique_ptr<engine::PackJob> job = follower.begin_boundary();
    if (job != nullptr) {
      job->pack();
      follower.finish_boundary(std::move(job));
    }
  };
  boundary();
  for (int i = 0; i < 40 && follower.stats().followed == 0; ++i) {
    ASSERT_NO_FATAL_FAILURE(step());
    boundary();
  }
  ASSERT_GT(follower.stats().followed, 0u) << "a plan is followed";
  // Granules mapped far above the plan, left cached after the free.
  const std::uint64_t region = heap.base() + 512 * MiB;
  const std::uint64_t mapped = heap.allocate_at(region, 8 * MiB, 3);
  ASSERT_EQ(mapped, region);
  {
    engine::Heap::Freed freed;
    ASSERT_TRUE(heap.deallocate(mapped, freed));
  }
  const StepPlanStats before = follower.stats();
  std::vector<std::uint64_t> ballast;
  ballast.reserve(2048);  // nothing of the test's own allocates under the failures
  std::uint64_t declined = 1;
  {
    const ScopedFailures failing;
    for (std::uint64_t i = 0; i < 2048 && declined != 0; ++i) {
      declined = heap.allocate_at(region + i * 4096, 4096, 3);
      if (declined != 0) ballast.push_back(declined);
    }
    if (declined == 0 && heap.last_failure() == engine::HeapFailure::host_memory) {
      const std::uint64_t planned = follower.allocate(16 * MiB, 1);  // the plan's first entry
      EXPECT_EQ(planned, 0u);
      EXPECT_EQ(heap.last_failure(), engine::HeapFailure::host_memory) << "the reason is kept for the caller";
    }
  }
  ASSERT_EQ(declined, 0u) << "the books reached their edge";
  ASSERT_EQ(heap.last_failure(), engine::HeapFailure::host_memory);
  EXPECT_EQ(follower.stats().over_limit, before.over_limit) << "not over the limit: out of host memory";
  EXPECT_EQ(follower.stats().occupied, before.occupied);
  for (const std::uint64_t addr : ballast) {
    engine::Heap::Freed freed;
    ASSERT_TRUE(heap.deallocate(addr, freed));
  }
  const std::uint64_t again = follower.allocate(16 * MiB, 1);  // with host memory, the plan is followed again
  EXPECT_NE(again, 0u);
  EXPECT_EQ(follower.stats().followed, before.followed + 1);
}

}  // namespace
}  // namespace plimsoll
