// fork() beside per-thread caches (src/engine/thread_cache.hpp): only the forking thread lives on in the child, so a
// cache whose owner was inside an operation at the fork, or a lock another thread held, must not be copied into
// the child as it was, or the child's next flush waits forever. The owner is parked inside its operation through a
// seam (an upstream that holds it in take_blocks until a thread emptying its cache asks it to stop); the child
// flushes, allocates and frees, and the parent fails the test if the child does not exit cleanly in time.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "backings/backing_adaptor.hpp"
#include "backings/sim_backing.hpp"
#include "engine/fork_handlers.hpp"
#include "engine/heap.hpp"
#include "engine/step_listeners.hpp"
#include "engine/thread_cache.hpp"
#include "util/spin_lock.hpp"

#include "fork_child.hpp"

namespace plimsoll {
namespace {

constexpr std::uint64_t MiB = 1ull << 20;

// The front over a bare heap, with a lock of its own; parks the next owner that takes blocks inside its operation
// until the thread emptying its cache (a flush, or fork()'s preparation) asks it to stop, or the test releases it.
class ParkingUpstream : public engine::FrontUpstream {
 public:
  explicit ParkingUpstream(engine::Heap& heap) : heap_(heap) {}
  std::size_t take_blocks(std::uint64_t size, std::size_t count, std::uint64_t* out) override {
    if (park_next.exchange(false)) {
      parked = true;
      while (!front->stop_requested() && !release.load()) std::this_thread::yield();
      parked = false;
    }
    util::SpinGuard guard(lock_);
    std::size_t taken = 0;
    for (; taken < count; ++taken) {
      out[taken] = heap_.allocate(size, engine::kFrontTag);
      if (out[taken] == 0) break;
    }
    return taken;
  }
  void give_back(std::span<const std::uint64_t> addrs) override {
    util::SpinGuard guard(lock_);
    for (std::uint64_t addr : addrs) {
      engine::Heap::Freed freed;
      if (!heap_.deallocate(addr, freed)) bad_give_back = true;
    }
  }
  std::uint64_t live() {
    util::SpinGuard guard(lock_);
    return heap_.live_allocations();
  }
  engine::ThreadCaches* front = nullptr;
  std::atomic<bool> park_next{false}, parked{false}, release{false}, bad_give_back{false};

 private:
  engine::Heap& heap_;
  util::SpinLock lock_;
};

// What the child checks; its exit status says which check failed (0: all passed).
int child_checks(engine::ThreadCaches& front, ParkingUpstream& upstream) {
  front.flush();  // waits for every owner's operation: hangs if a dead thread's cache still looks busy
  if (front.totals().cached_blocks != 0) return 2;
  // The parked owner's block was handed out before the fork: the program (in the child, nobody) still holds it.
  if (front.totals().handed_live != 1) return 3;
  if (upstream.live() != 1) return 4;
  std::vector<std::uint64_t> blocks;
  for (std::uint64_t i = 0; i < 40; ++i) blocks.push_back(front.allocate(256 * (1 + i % 8), 1));
  for (std::uint64_t addr : blocks) {
    if (addr == 0) return 5;
    if (!front.deallocate(addr)) return 6;
  }
  if (front.totals().handed_live != 1 || front.totals().cached_blocks == 0) return 7;
  front.flush();
  if (upstream.live() != 1 || upstream.bad_give_back) return 8;
  return 0;
}

TEST(ThreadsFrontFork, ForkWhileAnotherThreadIsInsideItsOperationLeavesAWorkingChild) {
  backings::SimBacking backing(4ull << 30);
  engine::Heap heap(backing, engine::HeapOptions{.limit = 1ull << 30});
  ParkingUpstream upstream(heap);
  engine::ThreadCaches front(upstream, 1 * MiB);
  upstream.front = &front;
  // The forking thread has a cache of its own, with blocks in it.
  const std::uint64_t mine = front.allocate(512, 1);
  ASSERT_NE(mine, 0u);
  ASSERT_TRUE(front.deallocate(mine));

  std::atomic<bool> owner_done{false}, owner_may_exit{false};
  std::uint64_t owner_block = 0;
  std::thread owner([&] {
    std::vector<std::uint64_t> blocks;
    for (int i = 0; i < 4; ++i) blocks.push_back(front.allocate(1024, 1));
    for (std::uint64_t addr : blocks) front.deallocate(addr);  // four blocks cached in its bins
    upstream.park_next = true;
    owner_block = front.allocate(2048, 1);  // an empty bin: parked in take_blocks, inside the operation
    owner_done = true;
    while (!owner_may_exit.load()) std::this_thread::yield();
  });
  while (!upstream.parked.load()) std::this_thread::yield();

  const pid_t child = fork();
  ASSERT_NE(child, -1);
  if (child == 0) _exit(child_checks(front, upstream));

  int status = 0;
  const bool exited = fork_test::child_exited_in_time(child, status);
  upstream.release = true;  // the parent's owner, in case the fork did not ask it to stop
  EXPECT_TRUE(exited) << "the child hung: a cache of a thread that does not exist in it still looked busy";
  if (exited) {
    EXPECT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "the child's check number " << WEXITSTATUS(status) << " failed";
  }

  // The parent goes on as before the fork: the owner finished its allocation, and every lock was given back.
  while (!owner_done.load()) std::this_thread::yield();
  EXPECT_NE(owner_block, 0u);
  EXPECT_EQ(front.totals().handed_live, 1u);
  EXPECT_TRUE(front.deallocate(owner_block));
  owner_may_exit = true;
  owner.join();
  const std::uint64_t again = front.allocate(512, 1);
  EXPECT_NE(again, 0u);
  EXPECT_TRUE(front.deallocate(again));
  front.flush();
  EXPECT_EQ(upstream.live(), 0u);
  EXPECT_FALSE(upstream.bad_give_back.load());
}

// The window in ThreadCache::begin(): an owner the fork's preparation already stopped (its flag seen down) enters
// its next operation, raises the flag, and only then sees `steal`. A fork copied then keeps the flag raised in the
// child, whose next flush waited for it forever. The preparation is held past the fronts, inside a registered
// device's backing lock (a seam: an adaptor's upstream is taken there), until the owner is inside the window (the
// other seam); the owner leaves the window once the parent's handlers ran.
std::atomic<bool> fronts_stopped{false}, owner_in_window{false};
void park_stopped_owner_until_the_fork_is_done() {
  owner_in_window = true;
  while (engine::fork_preparing()) std::this_thread::yield();
}

class HoldingForkBacking final : public backings::OwningBackingAdaptor {
 public:
  HoldingForkBacking() : OwningBackingAdaptor("holding", std::make_unique<backings::SimBacking>(4ull << 30)) {}

 private:
  void do_lock_upstream_for_fork() noexcept override {
    fronts_stopped = true;  // every owner stopped: the fronts come before the devices
    while (!owner_in_window.load()) std::this_thread::yield();
    upstream().lock_for_fork();
  }
  void do_unlock_upstream_after_fork() noexcept override { upstream().unlock_after_fork(); }
};

TEST(ThreadsFrontFork, AStoppedOwnerRaisingItsFlagBeforeTheForkLeavesAWorkingChild) {
  fronts_stopped = false;
  owner_in_window = false;
  backings::SimBacking backing(4ull << 30);
  engine::Heap heap(backing, engine::HeapOptions{.limit = 1ull << 30});
  ParkingUpstream upstream(heap);
  engine::ThreadCaches front(upstream, 1 * MiB);
  upstream.front = &front;
  front.deallocate(front.allocate(512, 1));  // the forking thread's own cache

  util::SpinLock device_lock;
  HoldingForkBacking device_backing;
  engine::register_device_lock(device_lock, &device_backing);
  std::atomic<bool> owner_joined{false}, owner_done{false};
  std::thread owner([&] {
    front.deallocate(front.allocate(1024, 1));  // joined, with a cache
    owner_joined = true;
    while (!fronts_stopped.load()) std::this_thread::yield();
    const std::uint64_t addr = front.allocate(1024, 1);  // raises its flag, then sees `steal`: the seam
    front.deallocate(addr);
    owner_done = true;
  });
  while (!owner_joined.load()) std::this_thread::yield();
  engine::ThreadCaches::set_stopped_owner_seam(&park_stopped_owner_until_the_fork_is_done);

  const pid_t child = fork();
  ASSERT_NE(child, -1);
  if (child == 0) {
    front.flush();  // waits for the owner's flag: hung on the code before
    const std::uint64_t addr = front.allocate(2048, 1);
    if (addr == 0 || !front.deallocate(addr)) _exit(2);
    front.flush();
    if (upstream.live() != 0 || front.totals().cached_blocks != 0) _exit(3);
    _exit(0);
  }
  engine::ThreadCaches::set_stopped_owner_seam(nullptr);
  int status = 0;
  const bool exited = fork_test::child_exited_in_time(child, status);
  owner.join();
  engine::unregister_device_lock(device_lock);
  EXPECT_TRUE(owner_in_window.load()) << "the owner never entered the window: the test did not test it";
  EXPECT_TRUE(exited) << "the child hung: a stopped owner's operation flag was copied raised into it";
  if (exited) {
    EXPECT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "the child's check number " << WEXITSTATUS(status) << " failed";
  }
  EXPECT_TRUE(owner_done.load());
  front.flush();
  EXPECT_EQ(upstream.live(), 0u);
  EXPECT_FALSE(upstream.bad_give_back.load());
}

// A fork whose preparation waits for the step registry (announce_step holds it across every device's step(), a
// pack included) must not have stopped the fronts' owners meanwhile: their threads would stall as long. A helper
// holds the registry (as an announcement does) until an owner's allocation completes, or the owner finds itself
// stopped (the order before: fronts first), or a deadline passes. Nothing shows the preparation waiting for the
// registry, so the owner watches its own stop for half a second first.
TEST(ThreadsFrontFork, AForkWaitingForAStepStallsNoFrontThread) {
  backings::SimBacking backing(4ull << 30);
  engine::Heap heap(backing, engine::HeapOptions{.limit = 1ull << 30});
  ParkingUpstream upstream(heap);
  engine::ThreadCaches front(upstream, 1 * MiB);
  upstream.front = &front;

  std::atomic<bool> step_held{false}, owner_joined{false}, allocated{false}, stalled{false}, may_exit{false};
  // Both threads stay alive until the parent is done with the child: a thread that finished unjoined before the
  // fork is a leak to ThreadSanitizer in the child.
  std::thread owner([&] {
    front.deallocate(front.allocate(1024, 1));  // joined, with a cache
    owner_joined = true;
    while (!engine::fork_preparing()) std::this_thread::yield();
    // The order before stopped the fronts within microseconds of the flag; this order never does before the step
    // registry is free. A correct order passes whatever this wait's length: it only gives the wrong one time to show.
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
    while (!front.stop_requested() && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
    if (front.stop_requested()) {
      stalled = true;  // the preparation stopped this owner while it waits for the step registry
    } else {
      front.deallocate(front.allocate(1024, 1));
      allocated = true;
    }
    while (!may_exit.load()) std::this_thread::yield();
  });
  std::thread announcer([&] {
    engine::lock_step_listeners_for_fork();  // as announce_step holds it
    step_held = true;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!allocated.load() && !stalled.load() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::yield();
    engine::unlock_step_listeners_after_fork();
    while (!may_exit.load()) std::this_thread::yield();
  });
  engine::make_step_listeners_for_fork();
  while (!owner_joined.load() || !step_held.load()) std::this_thread::yield();

  const pid_t child = fork();
  ASSERT_NE(child, -1);
  if (child == 0) {
    front.flush();
    _exit(0);
  }
  int status = 0;
  const bool exited = fork_test::child_exited_in_time(child, status);
  may_exit = true;
  owner.join();
  announcer.join();
  EXPECT_TRUE(exited && WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_FALSE(stalled.load()) << "the fork stopped a front's owner while it waited for the step registry";
  EXPECT_TRUE(allocated.load()) << "a front's owner could not allocate while a fork waited for a step";
  front.flush();
  EXPECT_EQ(upstream.live(), 0u);
}

}  // namespace
}  // namespace plimsoll
