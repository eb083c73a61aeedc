// Per-thread caches (src/engine/thread_cache.hpp) when host memory runs out inside them: the front's allocation runs
// inside Allocator::try_allocate, which is noexcept, so it must not throw; a free must neither lose the block nor
// count it twice. Failures are injected by replacing the global operator new in this test program (a seam that
// costs the library nothing): while `t_fail_new` is set, every allocation on this thread throws std::bad_alloc.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <new>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "backings/sim_backing.hpp"
#include "engine/heap.hpp"
#include "engine/thread_cache.hpp"
#include "util/spin_lock.hpp"

#include "failing_operator_new.hpp"
#include "fork_child.hpp"

namespace plimsoll {
namespace {

constexpr std::uint64_t MiB = 1ull << 20;

// Failures (ScopedFailures) apply to the front's own books only: the heap behind it allocates as usual.
class HeapUpstream : public engine::FrontUpstream {
 public:
  explicit HeapUpstream(engine::Heap& heap) : heap_(heap) {}
  std::size_t take_blocks(std::uint64_t size, std::size_t count, std::uint64_t* out) override {
    const bool failing = std::exchange(t_fail_new, false);
    util::SpinGuard guard(lock_);
    std::size_t taken = 0;
    for (; taken < count; ++taken) {
      out[taken] = heap_.allocate(size, engine::kFrontTag);
      if (out[taken] == 0) break;
    }
    t_fail_new = failing;
    return taken;
  }
  void give_back(std::span<const std::uint64_t> addrs) override {
    const bool failing = std::exchange(t_fail_new, false);
    util::SpinGuard guard(lock_);
    for (std::uint64_t addr : addrs) {
      engine::Heap::Freed freed;
      EXPECT_TRUE(heap_.deallocate(addr, freed)) << "the front gave back a block the heap does not hold";
    }
    t_fail_new = failing;
  }
  std::uint64_t live() {
    util::SpinGuard guard(lock_);
    return heap_.live_allocations();
  }

 private:
  engine::Heap& heap_;
  util::SpinLock lock_;
};

struct Front {
  backings::SimBacking backing{4ull << 30};
  engine::Heap heap{backing, engine::HeapOptions{.limit = 1ull << 30}};
  HeapUpstream upstream{heap};
  engine::ThreadCaches front{upstream, 1 * MiB};
};

// A tag first counted by this thread needs a new chunk of counts: made before anything changes, and when it cannot
// be made the front declines (the device's own path serves the request), instead of throwing out of noexcept code.
TEST(ThreadsFrontFaults, AnAllocationThatCannotGrowItsBooksDeclinesWithoutThrowing) {
  SKIP_UNLESS_NEW_CAN_FAIL();
  Front f;
  const std::uint64_t warm = f.front.allocate(1024, 1);
  ASSERT_TRUE(f.front.deallocate(warm));  // cached in this thread's bin (with the rest of its run)
  const std::uint64_t cached = f.front.totals().cached_blocks;
  std::uint64_t addr = 1;
  {
    ScopedFailures failing;
    EXPECT_NO_THROW(addr = f.front.allocate(1024, 300));  // tag 300: a chunk this cache has not made yet
  }
  EXPECT_EQ(addr, 0u) << "the front handed out a block it cannot count";
  EXPECT_EQ(f.front.totals().handed_live, 0u);
  EXPECT_EQ(f.front.totals().cached_blocks, cached) << "the declined allocation lost the cached block";
  const std::uint64_t later = f.front.allocate(1024, 300);
  EXPECT_EQ(later, warm);
  ASSERT_GE(f.front.totals().tags.size(), 301u);  // whole chunks of 256: the retired counts cover each
  EXPECT_EQ(f.front.totals().tags[300].live, 1u);
  EXPECT_TRUE(f.front.deallocate(later));
  f.front.flush();
  EXPECT_EQ(f.upstream.live(), 0u);
}

// A thread's first allocation makes its cache: out of memory, it declines too.
TEST(ThreadsFrontFaults, AThreadThatCannotMakeItsCacheDeclines) {
  SKIP_UNLESS_NEW_CAN_FAIL();
  Front f;
  std::thread([&] {
    std::uint64_t addr = 1;
    {
      ScopedFailures failing;
      EXPECT_NO_THROW(addr = f.front.allocate(512, 1));
    }
    EXPECT_EQ(addr, 0u);
    addr = f.front.allocate(512, 1);  // memory back: the thread joins now
    EXPECT_NE(addr, 0u);
    EXPECT_TRUE(f.front.deallocate(addr));
  }).join();
  EXPECT_EQ(f.front.totals().allocations, 1u);
  f.front.flush();
  EXPECT_EQ(f.upstream.live(), 0u);
}

// A cross-thread free of a tag the freeing thread never counted: its chunk cannot be made, so the free throws
// before anything changed: the block is still handed out, counted once, and a later free succeeds.
TEST(ThreadsFrontFaults, AFreeThatCannotGrowItsBooksLeavesTheBlockHandedOutAndCountedOnce) {
  SKIP_UNLESS_NEW_CAN_FAIL();
  Front f;
  std::uint64_t addr = 0;
  std::thread([&] { addr = f.front.allocate(1024, 300); }).join();
  ASSERT_NE(addr, 0u);
  const std::uint64_t mine = f.front.allocate(1024, 1);  // this thread's cache, without tag 300's chunk
  ASSERT_TRUE(f.front.deallocate(mine));
  {
    ScopedFailures failing;
    EXPECT_THROW(f.front.deallocate(addr), std::bad_alloc);
  }
  std::uint64_t requested = 0;
  std::uint16_t tag = 0;
  EXPECT_TRUE(f.front.handed_out(addr, requested, tag)) << "the failed free lost the block";
  EXPECT_EQ(f.front.totals().handed_live, 1u);
  EXPECT_EQ(f.front.totals().frees, 1u);
  EXPECT_TRUE(f.front.deallocate(addr)) << "a second free of a block still held must succeed";
  EXPECT_EQ(f.front.totals().handed_live, 0u);
  EXPECT_EQ(f.front.totals().handed_bytes, 0u);
  f.front.flush();
  EXPECT_EQ(f.upstream.live(), 0u);
}

// A free into a bin at its depth moves half the bin to the depot, whose bin grows: out of memory, the freed block
// goes straight back to the heap, and nothing is lost or counted twice.
TEST(ThreadsFrontFaults, AFullCacheThatCannotGrowTheDepotGivesTheBlockToTheHeap) {
  SKIP_UNLESS_NEW_CAN_FAIL();
  Front f;
  std::vector<std::uint64_t> blocks;
  for (int i = 0; i < 66; ++i) blocks.push_back(f.front.allocate(1024, 1));  // runs of two: none left cached
  for (int i = 0; i < 64; ++i) ASSERT_TRUE(f.front.deallocate(blocks[static_cast<std::size_t>(i)]));
  ASSERT_EQ(f.front.totals().cached_blocks, 64u) << "the bin is at its depth";
  bool freed = false;
  {
    ScopedFailures failing;
    EXPECT_NO_THROW(freed = f.front.deallocate(blocks[64]));
  }
  EXPECT_TRUE(freed);
  const engine::FrontTotals totals = f.front.totals();
  EXPECT_EQ(totals.handed_live, 1u);
  EXPECT_EQ(f.upstream.live(), totals.cached_blocks + 1) << "a block neither cached nor given back";
  EXPECT_EQ(totals.cached_blocks, 64u);
  EXPECT_TRUE(f.front.deallocate(blocks[65]));
  f.front.flush();
  EXPECT_EQ(f.upstream.live(), 0u);
}

// A turn-off (a device's pause, a recording attaching, set_thread_cache(0)) flushes every cache after it, and the hit
// reads no serving flag: it relies on that flush leaving every bin empty. Out of host memory for the flush's lists
// (of caches, of blocks) the blocks go back a piece of 256 at a time, here more than one piece from six bins, and
// the depot's too, so the front hands out nothing while off. Before, the flush threw std::bad_alloc with the bins
// full and the next request was handed a cached block.
TEST(ThreadsFrontFaults, AFlushOutOfHostMemoryStillEmptiesEveryBin) {
  SKIP_UNLESS_NEW_CAN_FAIL();
  std::atomic<bool> serving{true};
  backings::SimBacking backing{4ull << 30};
  engine::Heap heap{backing, engine::HeapOptions{.limit = 1ull << 30}};
  HeapUpstream upstream{heap};
  engine::ThreadCaches front{upstream, 1 * MiB, &serving};
  std::vector<std::uint64_t> blocks;
  for (std::uint64_t size = 256; size <= 6 * 256; size += 256) {  // 64 blocks a bin: six bins, 384 blocks
    for (int i = 0; i < 100; ++i) blocks.push_back(front.allocate(size, 1));
  }
  for (const std::uint64_t block : blocks) {
    ASSERT_NE(block, 0u);
    ASSERT_TRUE(front.deallocate(block));
  }
  const engine::FrontTotals before = front.totals();
  ASSERT_GT(before.cached_blocks - before.depot_bytes / 256, 256u) << "more than one piece in this thread's cache";
  ASSERT_GT(before.depot_bytes, 0u) << "the depot holds blocks too";
  serving = false;  // a turn-off
  std::size_t flushed = 0;
  {
    ScopedFailures failing;
    EXPECT_NO_THROW(flushed = front.flush());
  }
  EXPECT_EQ(flushed, before.cached_blocks);
  const engine::FrontTotals after = front.totals();
  EXPECT_EQ(after.cached_blocks, 0u);
  EXPECT_EQ(after.cached_bytes, 0u);
  EXPECT_EQ(after.depot_bytes, 0u);
  EXPECT_EQ(after.handed_live, 0u);
  EXPECT_EQ(upstream.live(), 0u) << "every cached block went back to the heap";
  EXPECT_EQ(front.allocate(256, 1), 0u) << "the front handed out a block while not serving";
  EXPECT_EQ(front.allocate(6 * 256, 1), 0u) << "the front handed out a block while not serving";
  serving = true;
  const std::uint64_t again = front.allocate(256, 1);
  ASSERT_NE(again, 0u);
  EXPECT_TRUE(front.deallocate(again));
  front.flush();
  EXPECT_EQ(upstream.live(), 0u);
}

// A thread's exit folds its cache's counts into the front's retired counts (ThreadSlots' destructor: nothing can
// report a std::bad_alloc there). Those counts got room for every tag's chunk when the cache first counted it, so
// the exit allocates nothing: host memory fails for the whole exit here. Before, the fold grew the retired counts
// to the tag and the exit ended in std::terminate.
TEST(ThreadsFrontFaults, AThreadExitsWithoutAllocating) {
  SKIP_UNLESS_NEW_CAN_FAIL();
  Front f;
  std::uint64_t kept = 0;
  std::thread worker([&] {
    const std::uint64_t freed = f.front.allocate(1024, 700);  // tag 700: the third chunk of 256
    kept = f.front.allocate(512, 700);
    EXPECT_TRUE(f.front.deallocate(freed));  // cached: the exit gives it back
    t_fail_new = true;  // from here to the end of the thread, including its exit
  });
  worker.join();
  ASSERT_NE(kept, 0u);
  const engine::FrontTotals totals = f.front.totals();
  EXPECT_EQ(totals.handed_live, 1u) << "the exited thread's counts are kept";
  EXPECT_EQ(totals.cached_blocks, 0u) << "the exit gave its cached blocks back";
  ASSERT_GT(totals.tags.size(), 700u);
  EXPECT_EQ(totals.tags[700].live, 1u);
  EXPECT_EQ(totals.tags[700].bytes, 512u);
  EXPECT_EQ(f.upstream.live(), 1u);
  EXPECT_TRUE(f.front.deallocate(kept));  // counted as a free of the exited thread's allocation
  EXPECT_EQ(f.front.totals().handed_live, 0u);
  f.front.flush();
  EXPECT_EQ(f.upstream.live(), 0u);
}

// fork() with host memory failing throughout: the fork handlers allocate nothing (their lists have room made when
// each thread joined; in the child, a dead thread's cache stays as it was until a flush). Before, the preparation
// copied the list of caches and the child's handler grew the depot's bins.
TEST(ThreadsFrontFaults, AForkNeedsNoHostMemory) {
  SKIP_UNLESS_NEW_CAN_FAIL();
  Front f;
  f.front.deallocate(f.front.allocate(512, 1));  // the forking thread's own cache
  std::atomic<bool> ready{false}, may_exit{false};
  std::uint64_t kept = 0;
  std::thread other([&] {
    std::vector<std::uint64_t> blocks;
    for (int i = 0; i < 8; ++i) blocks.push_back(f.front.allocate(2048, 300));
    for (std::uint64_t addr : blocks) f.front.deallocate(addr);  // cached in this thread's bins
    kept = f.front.allocate(4096, 300);
    ready = true;
    while (!may_exit.load()) std::this_thread::yield();
  });
  while (!ready.load()) std::this_thread::yield();
  t_fail_new = true;
  const pid_t child = fork();
  if (child == 0) {
    t_fail_new = false;
    // The other thread's cache is still counted and its blocks come back at a flush.
    if (f.front.totals().handed_live != 1) _exit(2);
    f.front.flush();
    if (f.front.totals().cached_blocks != 0 || f.upstream.live() != 1) _exit(3);
    const std::uint64_t again = f.front.allocate(2048, 300);
    if (again == 0 || !f.front.deallocate(again) || !f.front.deallocate(kept)) _exit(4);
    f.front.flush();
    _exit(f.upstream.live() == 0 && f.front.totals().handed_live == 0 ? 0 : 5);
  }
  t_fail_new = false;
  ASSERT_NE(child, -1);
  int status = 0;
  const bool exited = fork_test::child_exited_in_time(child, status);
  may_exit = true;
  other.join();
  EXPECT_TRUE(exited) << "the child hung";
  EXPECT_TRUE(exited && WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "the child's check number " << WEXITSTATUS(status) << " failed";
  EXPECT_TRUE(f.front.deallocate(kept));
  f.front.flush();
  EXPECT_EQ(f.upstream.live(), 0u);
}

}  // namespace
}  // namespace plimsoll
