// Big blocks (64 KiB-1 MiB) in the per-thread caches, through the device: double frees of cached and evicted ones,
// sizes at the class boundaries, the out-of-memory retry, fork() with a dead thread's big blocks, the switch turning
// on under working threads, and threads that only ask for big blocks (docs/engine.md, "Threads").
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <barrier>
#include <random>
#include <thread>
#include <vector>

#include "backings/sim_backing.hpp"
#include "plimsoll/allocator.hpp"
#include "plimsoll/error.hpp"
#include "plimsoll/oom.hpp"

#include "fork_child.hpp"
#include "sim_device.hpp"

namespace plimsoll {
namespace {

constexpr std::uint64_t KiB = 1ull << 10, MiB = 1ull << 20;

using testing_support::sim_device;

std::uint64_t rounded(std::uint64_t b) { return ((b ? b : 1) + 255) & ~std::uint64_t{255}; }

// Two threads joined: big blocks on. Returns after a second thread touched the front.
void join_two(Allocator& device) {
  device.deallocate(device.allocate(256));
  std::thread([&] { device.deallocate(device.allocate(256)); }).join();
}

TEST(ThreadsFrontBig, DoubleFreeOfCachedAndEvictedBigBlocks) {
  Allocator device(sim_device(256 * MiB), std::make_unique<backings::SimBacking>(4ull << 30));
  device.set_thread_cache(8 * MiB);  // big: 2 MiB, 8 slots
  join_two(device);
  void* p = device.allocate(200 * KiB);
  device.deallocate(p);
  EXPECT_THROW(device.deallocate(p), InvalidFree);
  EXPECT_FALSE(device.owns(p));
  void* q = device.allocate(200 * KiB);
  EXPECT_EQ(q, p);
  EXPECT_TRUE(device.owns(q));
  // interior pointers of a big block, on and off region starts
  auto base = reinterpret_cast<std::uintptr_t>(q);
  const std::uintptr_t next_region = (base + 64 * KiB) & ~std::uintptr_t{64 * KiB - 1};
  EXPECT_THROW(device.deallocate(reinterpret_cast<void*>(next_region)), InvalidFree);
  EXPECT_THROW(device.deallocate(reinterpret_cast<void*>(base + 256)), InvalidFree);
  EXPECT_TRUE(device.owns(q));
  device.deallocate(q);
  // evicted: 12 x 200 KiB freed, the oldest go back to the heap
  std::vector<void*> blocks;
  for (int i = 0; i < 12; ++i) blocks.push_back(device.allocate(200 * KiB));
  for (void* b : blocks) device.deallocate(b);
  for (void* b : blocks) EXPECT_THROW(device.deallocate(b), InvalidFree);
  const Stats s = device.stats();
  EXPECT_EQ(s.in_use_bytes, 0u);
  EXPECT_EQ(s.live_allocations, 0u);
  EXPECT_EQ(s.allocations, s.frees);
  device.trim();
  EXPECT_EQ(device.stats().reserved_bytes, 0u);
}

TEST(ThreadsFrontBig, BoundarySizesFromTwoThreadsKeepStatsExact) {
  Allocator device(sim_device(256 * MiB), std::make_unique<backings::SimBacking>(4ull << 30));
  device.set_thread_cache(16 * MiB);
  join_two(device);
  const std::uint64_t sizes[] = {64 * KiB - 1, 64 * KiB, 64 * KiB + 1, 64 * KiB + 256, 64 * KiB + 257,
                                 MiB - 255,    MiB - 1,  MiB,          MiB + 1,         2 * MiB};
  for (int round = 0; round < 3; ++round) {
    std::vector<void*> blocks;
    std::uint64_t in_use = 0;
    for (std::uint64_t b : sizes) {
      blocks.push_back(device.allocate(b));
      in_use += rounded(b);
      ASSERT_EQ(device.stats().in_use_bytes, in_use) << b;
    }
    // freed by another thread, then reused by this one
    std::thread([&] {
      for (void* p : blocks) device.deallocate(p);
      EXPECT_EQ(device.stats().in_use_bytes, 0u);
      for (void* p : blocks) EXPECT_THROW(device.deallocate(p), InvalidFree);
    }).join();
  }
  const Stats s = device.stats();
  EXPECT_EQ(s.in_use_bytes, 0u);
  EXPECT_EQ(s.allocations, s.frees);
  device.trim();
  EXPECT_EQ(device.stats().reserved_bytes, 0u);
}

// A thread holding cached big blocks stays alive; another needs the memory under the limit: OOM retry flushes.
TEST(ThreadsFrontBig, OutOfMemoryRetryTakesBigBlocksBack) {
  Allocator device(sim_device(8 * MiB), std::make_unique<backings::SimBacking>(4ull << 30));
  device.set_thread_cache(16 * MiB);  // big: up to 4 MiB a cache
  device.deallocate(device.allocate(256));  // this thread joins first
  std::barrier filled(2), done(2);
  std::thread holder([&] {
    device.deallocate(device.allocate(256));
    std::vector<void*> blocks;
    for (int i = 0; i < 4; ++i) blocks.push_back(device.allocate(MiB));
    for (void* p : blocks) device.deallocate(p);
    filled.arrive_and_wait();
    done.arrive_and_wait();
  });
  filled.arrive_and_wait();
  EXPECT_EQ(device.stats().in_use_bytes, 0u);
  EXPECT_NE(device.snapshot().find("\"cached\""), std::string::npos);
  void* big = device.allocate(6 * MiB);
  EXPECT_EQ(device.stats().ooms, 0u);
  EXPECT_LE(device.stats().reserved_bytes, 8 * MiB);
  device.deallocate(big);
  done.arrive_and_wait();
  holder.join();
  device.trim();
  EXPECT_EQ(device.stats().reserved_bytes, 0u);
}

// fork() while another thread holds cached big blocks and a handed-out big block.
TEST(ThreadsFrontBig, ForkWithADeadThreadsBigBlocks) {
  Allocator device(sim_device(256 * MiB), std::make_unique<backings::SimBacking>(4ull << 30));
  device.set_thread_cache(8 * MiB);
  device.deallocate(device.allocate(256));
  std::barrier filled(2), done(2);
  std::vector<void*> cached;
  void* held = nullptr;
  std::thread holder([&] {
    device.deallocate(device.allocate(256));  // joins: big blocks on
    for (int i = 0; i < 3; ++i) cached.push_back(device.allocate(300 * KiB));
    held = device.allocate(400 * KiB);
    for (void* p : cached) device.deallocate(p);
    filled.arrive_and_wait();
    done.arrive_and_wait();
  });
  filled.arrive_and_wait();
  const Stats before = device.stats();
  ASSERT_EQ(before.in_use_bytes, rounded(400 * KiB));
  const std::string snap = device.snapshot();
  int cached_big = 0;
  for (std::size_t at = 0; (at = snap.find("\"bytes\":307200", at)) != std::string::npos; ++at) ++cached_big;
  ASSERT_EQ(cached_big, 3) << "the holder's 300 KiB blocks should be cached (as front blocks)";
  ASSERT_NE(snap.find("\"cached\""), std::string::npos);
  const pid_t pid = fork();
  if (pid == 0) {
    int code = 0;
    Stats s = device.stats();
    if (s.in_use_bytes != rounded(400 * KiB)) code = 2;
    for (void* p : cached) {
      try {
        device.deallocate(p);
        code = 3;
      } catch (const InvalidFree&) {
      }
    }
    void* again = device.allocate(300 * KiB);
    device.deallocate(again);
    device.deallocate(held);  // the dead thread's handed-out big block
    try {
      device.deallocate(held);
      code = 4;
    } catch (const InvalidFree&) {
    }
    if (device.snapshot().find("\"cached\"") == std::string::npos) code = 7;  // the dead thread's, still in its cache
    s = device.stats();
    if (s.in_use_bytes != 0 || s.live_allocations != 0 || s.allocations != s.frees) code = 5;
    device.trim();
    if (device.stats().reserved_bytes != 0) code = 6;
    _exit(code);
  }
  int status = 0;
  EXPECT_TRUE(fork_test::child_exited_in_time(pid, status)) << "the child hung";
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  done.arrive_and_wait();
  holder.join();
  device.deallocate(held);
  device.trim();
  EXPECT_EQ(device.stats().reserved_bytes, 0u);
}

// Threads start at once (the switch turns on while others are mid-operation), big blocks of repeated sizes freed
// by other threads, trims beside them; stats exact at the end.
TEST(ThreadsFrontBig, SwitchFlipsUnderWorkingThreadsAndTrims) {
  for (int rep = 0; rep < 5; ++rep) {
    Allocator device(sim_device(128 * MiB), std::make_unique<backings::SimBacking>(4ull << 30));
    device.set_thread_cache(4 * MiB);
    std::atomic<bool> stop{false};
    std::vector<std::atomic<void*>> mailbox(64);
    std::barrier start(5);
    std::vector<std::thread> pool;
    for (int t = 0; t < 4; ++t) {
      pool.emplace_back([&, t] {
        std::mt19937_64 random(static_cast<std::uint64_t>(rep * 10 + t));
        start.arrive_and_wait();
        for (int i = 0; i < 3000; ++i) {
          const std::uint64_t b = (random() % 2) ? (1 + random() % 4) * 96 * KiB : random() % (MiB + 1);
          void* p = device.try_allocate(b);
          if (p == nullptr) continue;
          void* old = mailbox[random() % mailbox.size()].exchange(p);
          if (old != nullptr) device.deallocate(old);
        }
      });
    }
    std::thread trimmer([&] {
      start.arrive_and_wait();
      while (!stop.load()) {
        device.trim();
        std::this_thread::yield();
      }
    });
    for (auto& th : pool) th.join();
    stop = true;
    trimmer.join();
    std::uint64_t live = 0;
    for (auto& slot : mailbox)
      if (slot.load() != nullptr) ++live;
    EXPECT_EQ(device.stats().live_allocations, live);
    for (auto& slot : mailbox)
      if (void* p = slot.load()) device.deallocate(p);
    const Stats s = device.stats();
    EXPECT_EQ(s.in_use_bytes, 0u);
    EXPECT_EQ(s.allocations, s.frees);
    device.trim();
    EXPECT_EQ(device.stats().reserved_bytes, 0u);
  }
}

// Two threads that only ever ask for 64 KiB-1 MiB count as two threads: a declined big request joins the thread
// to the front (it used to join only through a small request, so big blocks never turned on for them).
TEST(ThreadsFrontBig, TwoThreadsOfBigRequestsOnlyTurnBigBlocksOn) {
  Allocator device(sim_device(256 * MiB), std::make_unique<backings::SimBacking>(4ull << 30));
  device.set_thread_cache(8 * MiB);
  std::barrier both(2);
  auto work = [&] {
    for (int i = 0; i < 100; ++i) {
      void* p = device.allocate(200 * KiB);
      device.deallocate(p);
    }
    both.arrive_and_wait();
    void* p = device.allocate(200 * KiB);
    device.deallocate(p);
    both.arrive_and_wait();
    EXPECT_NE(device.snapshot().find("\"cached\""), std::string::npos)
        << "docs: big blocks are kept once two threads use the device";
    both.arrive_and_wait();
  };
  std::thread other(work);
  work();
  other.join();
}
}  // namespace
}  // namespace plimsoll
