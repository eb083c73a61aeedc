// Per-thread caches (src/engine/thread_cache.hpp) under several threads, with cross-thread frees, checked by an
// independent model at quiescent points: every event is logged with a global sequence number (taken after an
// allocation returned, before a free is called), the logs are merged in that order, and the model's live set is
// compared with the heap (HeapChecker, tests/engine_heap_checker.hpp) and with the device's stats. Run under TSan.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "front_heap_upstream.hpp"
#include "backings/sim_backing.hpp"
#include "engine/heap.hpp"
#include "engine/thread_cache.hpp"
#include "engine_heap_checker.hpp"
#include "plimsoll/allocator.hpp"
#include "plimsoll/error.hpp"
#include "plimsoll/oom.hpp"
#include "util/spin_lock.hpp"

#include "sanitized.hpp"  // PLIMSOLL_TEST_UNDER_TSAN
#include "sim_device.hpp"

namespace plimsoll {
namespace {

constexpr std::uint64_t MiB = 1ull << 20;

struct Event {
  std::uint64_t seq, addr, requested;
  Tag tag;
  bool allocated;
};

std::uint64_t draw_size(std::mt19937_64& random) {
  switch (random() % 8) {
    case 0: return 0;
    case 1: return 64 * 1024 + random() % (2 * MiB);  // big blocks (the front's, up to 1 MiB), then the heap's path
    case 2: return 64 * 1024 - random() % 512;         // the front's largest binned sizes
    case 3: return (1 + random() % 4) * 160 * 1024;    // big blocks of a few sizes, so freed ones are taken again
    default: return random() % 8192;
  }
}

// Threads allocate and free at random; a third of their blocks go through a shared mailbox and are freed by
// another thread. Allocate and free come from the caller, so the same driver runs the front alone and a device.
template <class Allocate, class Free>
void run_round(int threads, int ops, std::uint64_t seed, Allocate allocate, Free free_block,
               std::vector<Event>& merged) {
  std::atomic<std::uint64_t> seq{0};
  std::mutex mailbox_lock;
  std::vector<std::uint64_t> mailbox;
  std::vector<std::vector<Event>> logs(static_cast<std::size_t>(threads));
  auto work = [&](int id) {
    std::mt19937_64 random(seed * 131 + static_cast<std::uint64_t>(id));
    std::vector<Event>& log = logs[static_cast<std::size_t>(id)];
    std::vector<std::uint64_t> mine;
    const Tag tag = static_cast<Tag>(1 + id % 3);
    auto release = [&](std::uint64_t addr) {
      log.push_back({seq.fetch_add(1), addr, 0, 0, false});
      free_block(addr);
    };
    for (int op = 0; op < ops; ++op) {
      const auto choice = random() % 8;
      if (choice < 4 || mine.empty()) {
        const std::uint64_t requested = draw_size(random);
        const std::uint64_t addr = allocate(requested, tag);
        if (addr == 0) continue;  // out of memory under the test's limit: allowed, and counted by the device
        log.push_back({seq.fetch_add(1), addr, requested, tag, true});
        if (random() % 3 == 0) {
          std::lock_guard guard(mailbox_lock);
          mailbox.push_back(addr);
        } else {
          mine.push_back(addr);
        }
      } else if (choice < 6) {
        const std::size_t pick = random() % mine.size();
        release(mine[pick]);
        mine[pick] = mine.back();
        mine.pop_back();
      } else {
        std::uint64_t addr = 0;
        {
          std::lock_guard guard(mailbox_lock);
          if (!mailbox.empty()) {
            addr = mailbox.back();
            mailbox.pop_back();
          }
        }
        if (addr != 0) release(addr);
      }
    }
    for (std::uint64_t addr : mine) release(addr);  // half the rounds leave blocks live: see below
  };
  std::vector<std::thread> pool;
  for (int id = 0; id < threads; ++id) pool.emplace_back(work, id);
  for (std::thread& thread : pool) thread.join();
  std::thread sweeper([&] {  // what nobody picked up: freed by one more thread, which exits too
    for (std::uint64_t addr : mailbox) {
      logs[0].push_back({seq.fetch_add(1), addr, 0, 0, false});
      free_block(addr);
    }
  });
  sweeper.join();
  merged.clear();
  for (const std::vector<Event>& log : logs) merged.insert(merged.end(), log.begin(), log.end());
  std::sort(merged.begin(), merged.end(), [](const Event& a, const Event& b) { return a.seq < b.seq; });
}

// The model: what the program holds, rebuilt from the merged log with the checks of a single-threaded run.
struct Model {
  struct Live {
    std::uint64_t size, requested;
    Tag tag;
  };
  std::map<std::uint64_t, Live> live;
  std::uint64_t allocations = 0, frees = 0, in_use = 0, requested = 0;
  // The most the merged log ever held: a lower bound of the program's true peak (an allocation is logged after it
  // returned, a free before it is called, so the log never holds a block the program did not).
  std::uint64_t peak = 0;

  void apply(const std::vector<Event>& events) {
    for (const Event& e : events) {
      if (e.allocated) {
        const std::uint64_t size = engine::Heap::round(e.requested);
        auto next = live.lower_bound(e.addr);
        ASSERT_TRUE(next == live.end() || e.addr + size <= next->first) << "overlaps a live block";
        if (next != live.begin()) {
          auto prev = std::prev(next);
          ASSERT_LE(prev->first + prev->second.size, e.addr) << "overlaps a live block";
        }
        live[e.addr] = Live{size, e.requested, e.tag};
        ++allocations;
        in_use += size;
        peak = std::max(peak, in_use);
        requested += e.requested;
      } else {
        auto it = live.find(e.addr);
        ASSERT_NE(it, live.end()) << "freed a block the model does not hold";
        in_use -= it->second.size;
        requested -= it->second.requested;
        live.erase(it);
        ++frees;
      }
    }
  }
};

using test_support::HeapUpstream;

TEST(ThreadsFront, CrossThreadFreesKeepTheHeapAndTheModelInAgreement) {
  backings::SimBacking backing(4ull << 30);
  engine::Heap heap(backing, engine::HeapOptions{.limit = 1ull << 30});
  HeapUpstream upstream(heap);
  engine::ThreadCaches front(upstream, 1 * MiB);
  // Requests past the front take the heap directly, as Allocator's slow path does.
  auto allocate = [&](std::uint64_t bytes, Tag tag) -> std::uint64_t {
    if (bytes <= engine::ThreadCaches::kMaxSize) return front.allocate(bytes, tag);
    util::SpinGuard guard(upstream.lock());
    return heap.allocate(bytes, tag);
  };
  auto free_block = [&](std::uint64_t addr) {
    if (front.deallocate(addr)) return;
    util::SpinGuard guard(upstream.lock());
    engine::Heap::Freed freed;
    ASSERT_TRUE(heap.deallocate(addr, freed));
  };
  Model model;
  std::vector<Event> events;
  for (std::uint64_t round = 0; round < 6; ++round) {
    run_round(4, 6000, round, allocate, free_block, events);
    ASSERT_NO_FATAL_FAILURE(model.apply(events));
    // Quiescent: the program's blocks are live heap blocks, and the front's books match the model exactly.
    const engine::FrontTotals totals = front.totals();
    std::uint64_t front_bytes = 0, front_live = 0;
    for (const auto& [addr, live] : model.live) {
      ASSERT_TRUE(heap.find_live(addr));
      if (live.size <= engine::ThreadCaches::kMaxSize) {
        front_bytes += live.size;
        ++front_live;
      }
    }
    EXPECT_EQ(totals.handed_bytes, front_bytes);
    EXPECT_EQ(totals.handed_live, front_live);
    EXPECT_EQ(heap.counters().in_use, model.in_use + totals.cached_bytes) << "cached blocks are heap-live";
    EXPECT_EQ(heap.live_allocations(), model.live.size() + totals.cached_blocks);
    EXPECT_LE(heap.mapped_bytes(), heap.options().limit);
  }
  // Flushed, the heap holds exactly the model's blocks: the single-threaded checker's full walk applies.
  EXPECT_LT(upstream.takes(), front.totals().allocations) << "no allocation was served from a cache";
  EXPECT_EQ(front.totals().cached_bytes, front.totals().depot_bytes) << "exiting threads must give their caches back";
  front.flush();
  EXPECT_EQ(front.totals().cached_bytes, 0u) << "flush left blocks cached";
  testing::HeapChecker checker(heap);
  for (const auto& [addr, live] : model.live) checker.allocated(addr, live.requested == 0 ? 1 : live.requested);
  ASSERT_NO_FATAL_FAILURE(checker.walk());
  for (const auto& [addr, live] : model.live) free_block(addr);
  front.flush();
  EXPECT_EQ(heap.live_allocations(), 0u);
  EXPECT_EQ(heap.counters().in_use, 0u);
}

using testing_support::sim_device;

TEST(ThreadsFront, DeviceStatsAreExactAtQuiescentPoints) {
  Allocator device(sim_device(512 * MiB), std::make_unique<backings::SimBacking>(4ull << 30));
  device.set_thread_cache(2 * MiB);
  auto allocate = [&](std::uint64_t bytes, Tag tag) {
    return reinterpret_cast<std::uint64_t>(device.try_allocate(bytes, tag));
  };
  auto free_block = [&](std::uint64_t addr) { device.deallocate(reinterpret_cast<void*>(addr)); };
  Model model;
  std::vector<Event> events;
  for (std::uint64_t round = 0; round < 6; ++round) {
    run_round(4, 6000, 100 + round, allocate, free_block, events);
    ASSERT_NO_FATAL_FAILURE(model.apply(events));
    const Stats s = device.stats();
    EXPECT_EQ(s.in_use_bytes, model.in_use);
    EXPECT_EQ(s.requested_bytes, model.requested);
    EXPECT_EQ(s.live_allocations, model.live.size());
    EXPECT_EQ(s.allocations, model.allocations);
    EXPECT_EQ(s.frees, model.frees);
    EXPECT_LE(s.reserved_bytes, s.limit_bytes);
    EXPECT_GE(s.peak_in_use_bytes, s.in_use_bytes);
    // The peak counts cached blocks (docs/engine.md, "Threads", Stats): at least the program's peak, at most that
    // plus what the front can hold cached at once (5 caches alive at a time here, the depot's 5 x their bytes),
    // plus a block in flight per thread (allocated, not yet logged) past the log's own peak.
    EXPECT_GE(s.peak_in_use_bytes, model.peak);
    EXPECT_LE(s.peak_in_use_bytes, model.peak + (5 + 5) * 2 * MiB + 4 * (2 * MiB + 64 * 1024));
    std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> by_tag;
    for (const auto& [addr, live] : model.live) {
      auto& [bytes, count] = by_tag[std::string(live.tag == kUntagged ? "untagged" : tag_name(live.tag))];
      bytes += live.size;
      ++count;
    }
    for (const TagStats& t : s.tags) {
      EXPECT_EQ(t.in_use_bytes, by_tag[t.tag].first) << t.tag;
      EXPECT_EQ(t.allocations, by_tag[t.tag].second) << t.tag;
    }
    const MemoryUsage usage = device.usage();
    EXPECT_EQ(usage.in_use_bytes, model.in_use);
    for (const auto& [addr, live] : model.live) EXPECT_TRUE(device.owns(reinterpret_cast<void*>(addr)));
  }
  std::thread([&] {
    for (const auto& [addr, live] : model.live) free_block(addr);
  }).join();
  device.trim();
  EXPECT_EQ(device.snapshot().find("\"cached\""), std::string::npos);
  EXPECT_EQ(device.stats().reserved_bytes, 0u) << "trim left cached blocks mapped";
  const Stats end = device.stats();
  EXPECT_EQ(end.in_use_bytes, 0u);
  EXPECT_EQ(end.live_allocations, 0u);
  EXPECT_EQ(end.allocations, end.frees);
}

TEST(ThreadsFront, TrimAndOutOfMemoryEmptyEveryThreadsCache) {
  Allocator device(sim_device(64 * MiB), std::make_unique<backings::SimBacking>(4ull << 30));
  device.set_thread_cache(64 * MiB);
  // Another thread fills its cache with 32 MiB (four blocks of each size up to 64 KiB) and stays alive, so its
  // cache is not returned by its exit.
  std::barrier filled(2), done(2);
  std::thread holder([&] {
    std::vector<void*> blocks;
    for (std::size_t i = 0; i < 1024; ++i) blocks.push_back(device.allocate(256 * (1 + i % 256)));
    for (void* p : blocks) device.deallocate(p);
    filled.arrive_and_wait();
    done.arrive_and_wait();
  });
  filled.arrive_and_wait();
  EXPECT_EQ(device.stats().in_use_bytes, 0u) << "cached blocks are free for the program";
  EXPECT_NE(device.snapshot().find("\"cached\""), std::string::npos);
  // 48 MiB more does not fit beside 32 MiB cached under a 64 MiB limit: the caches are emptied, not an OOM.
  void* big = device.allocate(48 * MiB);
  EXPECT_EQ(device.stats().ooms, 0u);
  device.deallocate(big);
  std::vector<void*> blocks;
  for (int i = 0; i < 64; ++i) blocks.push_back(device.allocate(16 * 1024));
  for (void* p : blocks) device.deallocate(p);
  EXPECT_NE(device.snapshot().find("\"cached\""), std::string::npos);
  device.trim();
  EXPECT_EQ(device.snapshot().find("\"cached\""), std::string::npos) << "trim left blocks in a cache";
  EXPECT_EQ(device.stats().reserved_bytes, 0u);
  done.arrive_and_wait();
  holder.join();
}

TEST(ThreadsFront, FreeingACachedBlockIsADoubleFree) {
  Allocator device(sim_device(64 * MiB), std::make_unique<backings::SimBacking>(4ull << 30));
  device.set_thread_cache(MiB);
  void* p = device.allocate(1000);
  device.deallocate(p);
  EXPECT_THROW(device.deallocate(p), InvalidFree);
  EXPECT_FALSE(device.owns(p));
  EXPECT_EQ(device.stats().frees, 1u);
  void* q = device.allocate(1000);
  EXPECT_EQ(q, p) << "the cache hands the freed block out again";
  device.deallocate(q);
  device.set_thread_cache(0);
  EXPECT_EQ(device.snapshot().find("\"cached\""), std::string::npos) << "turning the caches off empties them";
}

// The policy's thread_cache (JSON config, PLIMSOLL_THREAD_CACHE, plimsoll.configure) turns the caches on when the
// device is made, so a job reaches them without calling set_thread_cache.
TEST(ThreadsFront, ThePolicyTurnsTheCachesOn) {
  DeviceDescription with_cache = sim_device(64 * MiB);
  with_cache.policy.thread_cache = 2 * MiB;
  Allocator device(with_cache, std::make_unique<backings::SimBacking>(4ull << 30));
  EXPECT_EQ(device.thread_cache(), 2 * MiB);
  EXPECT_THAT(with_cache.summary(), ::testing::HasSubstr("thread cache 2.00 MiB"));
  void* block = device.allocate(4096);
  device.deallocate(block);  // into this thread's cache: still mapped, free for the program
  EXPECT_EQ(device.stats().in_use_bytes, 0u);
  EXPECT_GT(device.stats().reserved_bytes, 0u);
  device.set_thread_cache(0);
  EXPECT_EQ(device.thread_cache(), 0u);

  Allocator without(sim_device(64 * MiB), std::make_unique<backings::SimBacking>(4ull << 30));
  EXPECT_EQ(without.thread_cache(), 0u) << "off unless asked for";
}

// snapshot() while threads overflow their caches back into the heap (a cache's lock held, then the device's):
// snapshot must not hold the device lock while it reads the caches, or both wait forever. And two threads turning
// the caches on at once make one front.
TEST(ThreadsFront, SnapshotsAndConcurrentSetupDoNotDeadlockOrReplaceTheFront) {
  Allocator device(sim_device(256 * MiB), std::make_unique<backings::SimBacking>(4ull << 30));
  {
    std::barrier start(2);
    std::vector<std::thread> setters;
    for (int t = 0; t < 2; ++t) {
      setters.emplace_back([&] {
        start.arrive_and_wait();
        device.set_thread_cache(64 * 1024);
      });
    }
    for (std::thread& setter : setters) setter.join();
  }
  ASSERT_EQ(device.thread_cache(), 64u * 1024);
  std::atomic<bool> stop{false};
  std::vector<std::thread> workers;
  for (int t = 0; t < 2; ++t) {
    workers.emplace_back([&, t] {
      std::vector<void*> held;
      for (int i = 0; !stop.load(std::memory_order_relaxed) || i < 2000; ++i) {
        held.push_back(device.allocate(static_cast<std::size_t>(512 * (1 + (i + t) % 64))));
        if (held.size() >= 48) {  // more than a 64 KiB cache holds: the overflow goes back to the heap
          for (void* block : held) device.deallocate(block);
          held.clear();
        }
      }
      for (void* block : held) device.deallocate(block);
    });
  }
  for (int i = 0; i < 200; ++i) EXPECT_FALSE(device.snapshot().empty());
  stop = true;
  for (std::thread& worker : workers) worker.join();
  device.trim();
  EXPECT_EQ(device.stats().in_use_bytes, 0u);
}

// The fast path takes no lock: a thread emptying another's cache (flush: trim, out of memory, pause) stops the owner
// through the asymmetric barrier. A flusher running all the time beside four working threads must never take a
// block an owner is handing out (the model sees two live blocks overlap) nor lose one (the heap keeps blocks
// nobody holds, or the front's books disagree).
TEST(ThreadsFront, FlushesBesideWorkingOwnersNeitherDuplicateNorLoseABlock) {
  backings::SimBacking backing(4ull << 30);
  engine::Heap heap(backing, engine::HeapOptions{.limit = 1ull << 30});
  HeapUpstream upstream(heap);
  engine::ThreadCaches front(upstream, 1 * MiB);
  auto allocate = [&](std::uint64_t bytes, Tag tag) -> std::uint64_t {
    if (bytes <= engine::ThreadCaches::kMaxSize) return front.allocate(bytes, tag);
    util::SpinGuard guard(upstream.lock());
    return heap.allocate(bytes, tag);
  };
  auto free_block = [&](std::uint64_t addr) {
    if (front.deallocate(addr)) return;
    util::SpinGuard guard(upstream.lock());
    engine::Heap::Freed freed;
    ASSERT_TRUE(heap.deallocate(addr, freed));
  };
  Model model;
  std::vector<Event> events;
  std::size_t flushed = 0, flushes = 0;
  for (std::uint64_t round = 0; round < 4; ++round) {
    std::atomic<bool> stop{false};
    std::thread flusher([&] {
      while (!stop.load()) {
        flushed += front.flush();
        ++flushes;
        std::this_thread::yield();
      }
    });
    run_round(4, 6000, 200 + round, allocate, free_block, events);
    stop = true;
    flusher.join();
    ASSERT_NO_FATAL_FAILURE(model.apply(events));
    const engine::FrontTotals totals = front.totals();
    std::uint64_t front_bytes = 0, front_live = 0;
    for (const auto& [addr, live] : model.live) {
      ASSERT_TRUE(heap.find_live(addr));
      if (live.size <= engine::ThreadCaches::kMaxSize) {
        front_bytes += live.size;
        ++front_live;
      }
    }
    EXPECT_EQ(totals.handed_bytes, front_bytes);
    EXPECT_EQ(totals.handed_live, front_live);
    EXPECT_EQ(heap.counters().in_use, model.in_use + totals.cached_bytes) << "a block was lost or given twice";
    EXPECT_EQ(heap.live_allocations(), model.live.size() + totals.cached_blocks);
  }
  EXPECT_GT(flushes, 0u);
  front.flush();
  testing::HeapChecker checker(heap);
  for (const auto& [addr, live] : model.live) checker.allocated(addr, live.requested == 0 ? 1 : live.requested);
  ASSERT_NO_FATAL_FAILURE(checker.walk());
  for (const auto& [addr, live] : model.live) free_block(addr);
  front.flush();
  EXPECT_EQ(heap.live_allocations(), 0u);
  EXPECT_EQ(heap.counters().in_use, 0u);
  EXPECT_EQ(front.totals().allocations, front.totals().frees);
}

// An upstream that holds one owner inside its operation (take_blocks runs inside it) until a flush has started, and
// notes any block given back while the owner is still inside: a flush must wait for the owner to leave.
class GatedUpstream : public engine::FrontUpstream {
 public:
  explicit GatedUpstream(engine::Heap& heap) : inner_(heap) {}
  std::size_t take_blocks(std::uint64_t size, std::size_t count, std::uint64_t* out) override {
    if (hold_next.exchange(false)) {
      inside = true;
      while (!flush_started.load()) std::this_thread::yield();
      for (int i = 0; i < 2000; ++i) std::this_thread::yield();  // room for a flush that does not wait to run
      inside = false;
    }
    return inner_.take_blocks(size, count, out);
  }
  void give_back(std::span<const std::uint64_t> addrs) override {
    if (inside.load()) ++given_back_while_inside;
    inner_.give_back(addrs);
  }
  std::atomic<bool> hold_next{false}, inside{false}, flush_started{false};
  std::atomic<int> given_back_while_inside{0};

 private:
  HeapUpstream inner_;
};

TEST(ThreadsFront, AFlushWaitsForTheOwnerToLeaveItsOperation) {
  backings::SimBacking backing(4ull << 30);
  engine::Heap heap(backing, engine::HeapOptions{.limit = 1ull << 30});
  GatedUpstream upstream(heap);
  engine::ThreadCaches front(upstream, 1 * MiB);
  std::atomic<bool> owner_done{false};
  std::uint64_t held = 0;
  std::thread owner([&] {
    std::vector<std::uint64_t> blocks;
    for (int i = 0; i < 4; ++i) blocks.push_back(front.allocate(1024, 1));
    for (std::uint64_t addr : blocks) ASSERT_TRUE(front.deallocate(addr));  // four blocks cached in its bins
    upstream.hold_next = true;
    held = front.allocate(2048, 1);  // an empty bin: take_blocks, inside the operation
    owner_done = true;
    while (owner_done.load()) std::this_thread::yield();  // alive until the flush is checked: its cache stays
  });
  while (!upstream.inside.load()) std::this_thread::yield();
  std::size_t flushed = 0;
  std::thread flusher([&] {
    upstream.flush_started = true;
    flushed = front.flush();
  });
  flusher.join();
  while (!owner_done.load()) std::this_thread::yield();
  EXPECT_EQ(upstream.given_back_while_inside.load(), 0) << "a flush emptied a cache while its owner was using it";
  EXPECT_EQ(flushed, 4u);
  EXPECT_NE(held, 0u);
  EXPECT_EQ(front.totals().cached_blocks, 0u);
  EXPECT_EQ(front.totals().handed_live, 1u);
  owner_done = false;
  owner.join();
  ASSERT_TRUE(front.deallocate(held));
  front.flush();
  EXPECT_EQ(heap.live_allocations(), 0u);
}

// The pause window: a thread that read the device's `front_on` just before pause() turned it off reaches the front
// after the pause's flush has passed its cache. Inside its operation the front reads the flag again, so the freed
// block goes back to the heap (not into a cache, where it would sit on unmapped memory) and the allocation steps
// aside to the device's path (which refuses on a paused device) instead of handing that block out.
TEST(ThreadsFront, AThreadLateForAPauseNeitherKeepsNorHandsOutABlock) {
  backings::SimBacking backing(4ull << 30);
  engine::Heap heap(backing, engine::HeapOptions{.limit = 1ull << 30});
  HeapUpstream upstream(heap);
  std::atomic<bool> serving{true};
  engine::ThreadCaches front(upstream, 1 * MiB, &serving);
  std::atomic<int> stage{0};
  std::uint64_t block = 0, late_allocation = 1;
  bool freed_by_front = false;
  std::thread late([&] {
    block = front.allocate(1024, 1);  // the front is on: from this thread's cache
    stage = 1;
    while (stage.load() != 2) std::this_thread::yield();  // "read front_on == true", then stalled here
    freed_by_front = front.deallocate(block);
    late_allocation = front.allocate(1024, 1);
    stage = 3;
    while (stage.load() != 4) std::this_thread::yield();  // alive, so its cache stays registered
  });
  while (stage.load() != 1) std::this_thread::yield();
  serving = false;  // pause(): the front off, then every cache flushed, then the heap paused
  front.flush();
  const std::uint64_t live_at_pause = heap.live_allocations();
  stage = 2;
  while (stage.load() != 3) std::this_thread::yield();
  EXPECT_NE(block, 0u);
  EXPECT_EQ(live_at_pause, 1u) << "the flush left the thread's other cached blocks in the heap";
  EXPECT_TRUE(freed_by_front) << "the block was the front's: it must take the free";
  EXPECT_EQ(late_allocation, 0u) << "the front handed out a block after the pause's flush";
  const engine::FrontTotals totals = front.totals();
  EXPECT_EQ(totals.cached_blocks, 0u) << "a block freed after the pause's flush was kept in a cache";
  EXPECT_EQ(totals.handed_live, 0u);
  EXPECT_EQ(heap.live_allocations(), 0u) << "the late free did not go back to the heap";
  stage = 4;
  late.join();
  serving = true;  // resume(): the front serves again
  const std::uint64_t again = front.allocate(1024, 1);
  EXPECT_NE(again, 0u);
  EXPECT_TRUE(front.deallocate(again));
  front.flush();
  EXPECT_EQ(heap.live_allocations(), 0u);
}

// Through a device: pause and resume between rounds of threads working through their caches (cross-thread frees
// included); after each pause nothing is cached, allocations are refused until resume, and stats stay exact.
TEST(ThreadsFront, PauseAndResumeBetweenWorkingRoundsKeepStatsExact) {
  Allocator device(sim_device(256 * MiB), std::make_unique<backings::SimBacking>(4ull << 30));
  device.set_thread_cache(MiB);
  for (int round = 0; round < 3; ++round) {
    std::vector<void*> handed(4 * 200);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < 200; ++i) {
          void* p = device.allocate(256 + static_cast<std::size_t>((i * 97 + t * 31) % 8192));
          if (i % 2 == 0) {
            device.deallocate(p);
          } else {
            handed[static_cast<std::size_t>(t * 200 + i)] = p;
          }
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
    threads.clear();
    for (int t = 0; t < 4; ++t) {  // each thread frees another's blocks
      threads.emplace_back([&, t] {
        const int other = (t + 1) % 4;
        for (int i = 1; i < 200; i += 2) device.deallocate(handed[static_cast<std::size_t>(other * 200 + i)]);
      });
    }
    for (std::thread& thread : threads) thread.join();
    device.pause();
    EXPECT_THROW(device.allocate(512), InvalidState) << "a paused device served a small request";
    const Stats paused = device.stats();
    EXPECT_EQ(paused.in_use_bytes, 0u);
    EXPECT_EQ(paused.live_allocations, 0u);
    device.resume();
    void* p = device.allocate(512);
    device.deallocate(p);
  }
  const Stats s = device.stats();
  EXPECT_EQ(s.in_use_bytes, 0u);
  EXPECT_EQ(s.allocations, s.frees);
}

// The same through a device, where trim, turning the caches off and on, and stats() run beside the owners.
TEST(ThreadsFront, TrimAndToggleBesideWorkingOwnersKeepStatsExact) {
  Allocator device(sim_device(512 * MiB), std::make_unique<backings::SimBacking>(4ull << 30));
  device.set_thread_cache(2 * MiB);
  auto allocate = [&](std::uint64_t bytes, Tag tag) {
    return reinterpret_cast<std::uint64_t>(device.try_allocate(bytes, tag));
  };
  auto free_block = [&](std::uint64_t addr) { device.deallocate(reinterpret_cast<void*>(addr)); };
  Model model;
  std::vector<Event> events;
  for (std::uint64_t round = 0; round < 4; ++round) {
    std::atomic<bool> stop{false};
    std::thread meddler([&] {
      for (int i = 0; !stop.load(); ++i) {
        if (i % 3 == 0) device.trim();
        if (i % 3 == 1) device.set_thread_cache(i % 2 ? 0 : 2 * MiB);
        if (i % 3 == 2) {
          EXPECT_LE(device.stats().reserved_bytes, 512 * MiB);
        }
        std::this_thread::yield();
      }
    });
    run_round(4, 4000, 300 + round, allocate, free_block, events);
    stop = true;
    meddler.join();
    ASSERT_NO_FATAL_FAILURE(model.apply(events));
    const Stats s = device.stats();
    EXPECT_EQ(s.in_use_bytes, model.in_use);
    EXPECT_EQ(s.requested_bytes, model.requested);
    EXPECT_EQ(s.live_allocations, model.live.size());
    EXPECT_EQ(s.allocations, model.allocations);
    EXPECT_EQ(s.frees, model.frees);
    device.set_thread_cache(2 * MiB);
  }
  for (const auto& [addr, live] : model.live) free_block(addr);
  device.trim();
  EXPECT_EQ(device.stats().in_use_bytes, 0u);
  EXPECT_EQ(device.stats().reserved_bytes, 0u) << "trim left blocks in a cache";
}

// The OOM report's top tags count what the caches handed out, as its in_use_bytes does, and both agree with stats().
TEST(ThreadsFront, OutOfMemoryReportCountsBlocksTheCachesHandedOut) {
  Allocator device(sim_device(64 * MiB), std::make_unique<backings::SimBacking>(4ull << 30));
  device.set_thread_cache(MiB);
  const Tag activations = intern_tag("front-activations");
  std::vector<void*> held;
  for (int i = 0; i < 512; ++i) held.push_back(device.allocate(64 * 1024, activations));  // 32 MiB, all small
  ASSERT_GT(device.stats().in_use_bytes, 0u);
  try {
    (void)device.allocate(48 * MiB);
    FAIL() << "48 MiB beside 32 MiB held fits no 64 MiB limit";
  } catch (const OutOfMemory& oom) {
    const OomDetails& d = oom.details();
    EXPECT_EQ(d.in_use_bytes, 32 * MiB);
    EXPECT_EQ(d.in_use_bytes, device.stats().in_use_bytes);
    ASSERT_FALSE(d.top_tags.empty()) << "the blocks the caches handed out are left out of the top tags";
    EXPECT_EQ(d.top_tags.front().tag, "front-activations");
    EXPECT_EQ(d.top_tags.front().in_use_bytes, 32 * MiB);
    EXPECT_EQ(d.top_tags.front().allocations, 512u);
  }
  for (void* p : held) device.deallocate(p);
}

// After the caches are turned off and every front block has gone back, frees go straight to the heap (no front
// lookup under the device lock); a double free is still caught, before and after.
TEST(ThreadsFront, FreesAfterTheCachesAreOffStillCatchDoubleFrees) {
  Allocator device(sim_device(64 * MiB), std::make_unique<backings::SimBacking>(4ull << 30));
  device.set_thread_cache(MiB);
  void* small = device.allocate(512);
  void* cached = device.allocate(1024);
  device.deallocate(cached);
  device.set_thread_cache(0);  // `small` is still handed out: it goes back through the front's books
  EXPECT_THROW(device.deallocate(cached), InvalidFree) << "a block the caches gave back is free";
  device.deallocate(small);
  EXPECT_THROW(device.deallocate(small), InvalidFree);
  void* heap_block = device.allocate(512);  // the front is off: a heap block
  device.deallocate(heap_block);
  EXPECT_THROW(device.deallocate(heap_block), InvalidFree);
  const Stats s = device.stats();
  EXPECT_EQ(s.in_use_bytes, 0u);
  EXPECT_EQ(s.allocations, s.frees);
}

// The device's summary says which barrier the caches run with; under ThreadSanitizer (which does not model
// membarrier) it is the full fence, so TSan checks everything else.
TEST(ThreadsFront, TheSummaryNamesTheBarrier) {
  DeviceDescription with_cache = sim_device(64 * MiB);
  with_cache.policy.thread_cache = MiB;
  const std::string kind = engine::ThreadCaches::barrier_kind();
  EXPECT_TRUE(kind == "membarrier" || kind == "seq_cst fence") << kind;
  EXPECT_THAT(with_cache.summary(), ::testing::HasSubstr("thread cache 1.00 MiB (" + kind + ")"));
#ifdef PLIMSOLL_TEST_UNDER_TSAN
  EXPECT_EQ(kind, "seq_cst fence");
#endif
}

// A cache never holds more than `bytes_per_thread`, however it is refilled: a batch from the depot (up to 32 blocks)
// or a run from the heap (up to 8 blocks under 2 KiB) is cut to what is left of the cache's bytes, beside the one
// block handed out.
TEST(ThreadsFront, ARefillNeverTakesACachePastItsBytes) {
  backings::SimBacking backing(4ull << 30);
  engine::Heap heap(backing, engine::HeapOptions{.limit = 1ull << 30});
  HeapUpstream upstream(heap);
  constexpr std::uint64_t kBytesPerThread = 4096;
  engine::ThreadCaches front(upstream, kBytesPerThread);
  // A producer frees 120 blocks of 256 B: its cache (16 of them) sheds half to the depot each time it is full, and
  // the depot (at most 4 x 4 KiB) goes back to the heap whole once past that: 32 blocks are left in it.
  std::thread([&] {
    std::vector<std::uint64_t> blocks;
    for (int i = 0; i < 120; ++i) blocks.push_back(front.allocate(256, 1));
    for (std::uint64_t addr : blocks) ASSERT_TRUE(front.deallocate(addr));
  }).join();
  ASSERT_EQ(front.totals().depot_bytes, 32u * 256) << "the test needs a full batch in the depot";
  std::thread([&] {
    const std::uint64_t addr = front.allocate(256, 1);  // an empty bin: a batch from the depot
    ASSERT_NE(addr, 0u);
    const engine::FrontTotals totals = front.totals();
    EXPECT_LE(totals.cached_bytes - totals.depot_bytes, kBytesPerThread) << "the depot's batch overfilled the cache";
    EXPECT_GT(totals.cached_bytes - totals.depot_bytes, 0u) << "the batch should still fill the cache";
    ASSERT_TRUE(front.deallocate(addr));
  }).join();
  // A run from the heap, for a cache smaller than the run.
  engine::ThreadCaches small(upstream, 512);
  std::thread([&] {
    const std::uint64_t addr = small.allocate(256, 1);
    ASSERT_NE(addr, 0u);
    EXPECT_LE(small.totals().cached_bytes, 512u) << "the heap's run overfilled the cache";
    ASSERT_TRUE(small.deallocate(addr));
  }).join();
  front.flush();
  small.flush();
  EXPECT_EQ(heap.live_allocations(), 0u);
}

// Blocks over 64 KiB (up to 1 MiB) are kept by the freeing thread and matched by exact size, once a second thread
// has used the front: the next request of that size takes the block back without a trip to the device. They hold
// at most a quarter of a cache's bytes and at most kBigSlots blocks, the oldest going back to the heap first.
TEST(ThreadsFront, BigBlocksAreKeptByExactSizeInAQuarterOfTheCache) {
  backings::SimBacking backing(4ull << 30);
  engine::Heap heap(backing, engine::HeapOptions{.limit = 1ull << 30});
  HeapUpstream upstream(heap);
  engine::ThreadCaches front(upstream, 8 * MiB);
  EXPECT_EQ(front.allocate(256 * 1024, 1), 0u) << "one thread alone: big blocks take the device's own path";
  EXPECT_FALSE(front.big_blocks_on());
  const std::uint64_t small = front.allocate(1024, 1);  // this thread joins
  std::thread([&] {
    ASSERT_TRUE(front.deallocate(small));  // a second thread joins: big blocks from now on
    EXPECT_TRUE(front.big_blocks_on());
    const std::uint64_t cached = front.totals().cached_bytes;  // the small blocks
    const std::uint64_t first = front.allocate(256 * 1024, 1);
    ASSERT_NE(first, 0u);
    ASSERT_TRUE(front.deallocate(first));
    EXPECT_EQ(front.totals().cached_bytes, cached + 256 * 1024) << "the freed big block should stay in the cache";
    const std::uint64_t takes = upstream.takes();
    const std::uint64_t again = front.allocate(256 * 1024 - 100, 2);  // the same rounded size
    EXPECT_EQ(again, first) << "a big block of the same size should come back from the cache";
    EXPECT_EQ(upstream.takes(), takes) << "a cached big block should cost no device trip";
    const std::uint64_t other = front.allocate(256 * 1024 + 256, 2);  // one quantum more: not the same size
    EXPECT_NE(other, 0u);
    EXPECT_EQ(upstream.takes(), takes + 1);
    ASSERT_TRUE(front.deallocate(again));
    ASSERT_TRUE(front.deallocate(other));
    front.flush();
    ASSERT_EQ(heap.live_allocations(), 0u);

    std::vector<std::uint64_t> blocks;
    for (int i = 0; i < 12; ++i) blocks.push_back(front.allocate(192 * 1024, 1));  // 2.25 MiB
    for (std::uint64_t addr : blocks) ASSERT_TRUE(front.deallocate(addr));
    engine::FrontTotals totals = front.totals();
    EXPECT_EQ(totals.cached_bytes, 8u * 192 * 1024) << "the slots, not the bytes, bound 192 KiB blocks";
    EXPECT_EQ(heap.live_allocations(), totals.cached_blocks) << "a big block neither cached nor given back";
    const std::uint64_t latest = front.allocate(192 * 1024, 1);
    EXPECT_EQ(latest, blocks.back()) << "the most recently freed block comes back first";
    ASSERT_TRUE(front.deallocate(latest));
    front.flush();
    blocks.clear();
    for (int i = 0; i < 10; ++i) blocks.push_back(front.allocate(100 * 1024, 1));  // 1000 KiB in 10 blocks
    for (std::uint64_t addr : blocks) ASSERT_TRUE(front.deallocate(addr));
    totals = front.totals();
    EXPECT_EQ(totals.cached_blocks, engine::ThreadCaches::kBigSlots) << "more big blocks than a cache's slots";
    EXPECT_EQ(heap.live_allocations(), totals.cached_blocks);
    front.flush();
    blocks.clear();
    for (int i = 0; i < 4; ++i) blocks.push_back(front.allocate(MiB, 1));
    for (std::uint64_t addr : blocks) ASSERT_TRUE(front.deallocate(addr));
    totals = front.totals();
    EXPECT_EQ(totals.cached_bytes, 2 * MiB) << "big blocks past a quarter of the cache's bytes";
    EXPECT_EQ(heap.live_allocations(), totals.cached_blocks);
  }).join();  // the thread's exit gives its cache back
  EXPECT_EQ(heap.live_allocations(), 0u);
}

// A cache at its bytes sheds the older half of every bin to the depot and its big blocks to the heap (nobody takes
// big blocks from the depot), so a big block cannot hold a cache that small frees need.
TEST(ThreadsFront, ACacheAtItsBytesGivesItsBigBlocksBack) {
  backings::SimBacking backing(4ull << 30);
  engine::Heap heap(backing, engine::HeapOptions{.limit = 1ull << 30});
  HeapUpstream upstream(heap);
  engine::ThreadCaches front(upstream, MiB);  // big blocks: at most 256 KiB of it
  const std::uint64_t mine = front.allocate(256, 1);  // this thread's cache; the worker's is the second
  ASSERT_NE(mine, 0u);
  const std::uint64_t others = front.totals().cached_bytes;  // the rest of this thread's run of 256 B blocks
  std::thread([&] {
    const std::uint64_t big = front.allocate(192 * 1024, 1);  // this thread joins first: big blocks on
    ASSERT_NE(big, 0u);
    ASSERT_TRUE(front.big_blocks_on());
    ASSERT_TRUE(front.deallocate(big));
    ASSERT_EQ(front.totals().cached_bytes, others + 192 * 1024);
    std::vector<std::uint64_t> blocks;  // 16 KiB blocks, 64 of them: the bin fills past the cache's bytes
    for (int i = 0; i < 64; ++i) blocks.push_back(front.allocate(16 * 1024, 1));
    for (std::uint64_t addr : blocks) ASSERT_TRUE(front.deallocate(addr));
    const engine::FrontTotals totals = front.totals();
    EXPECT_LE(totals.cached_bytes - totals.depot_bytes - others, MiB) << "the cache past its bytes";
    EXPECT_EQ(heap.live_allocations(), totals.cached_blocks + 1) << "a block neither cached nor given back";
    const std::uint64_t takes = upstream.takes();
    const std::uint64_t again = front.allocate(192 * 1024, 1);
    EXPECT_EQ(upstream.takes(), takes + 1) << "the big block should have gone back to the heap with the shed";
    ASSERT_TRUE(front.deallocate(again));
  }).join();
  front.flush();
  EXPECT_EQ(heap.live_allocations(), 1u) << "only this thread's 256 B block should be left";
  ASSERT_TRUE(front.deallocate(mine));
}

// With the caches on, peak_in_use_bytes is the heap's peak, which counts cached blocks: an upper bound of what the
// program held at once, by at most the bytes the front held cached at that moment. Here exactly that: 256 KiB freed
// into the caches, then 256 KiB of another size allocated beside them.
TEST(ThreadsFront, PeakInUseIsAnUpperBoundByAtMostTheCachedBytes) {
  Allocator device(sim_device(64 * MiB), std::make_unique<backings::SimBacking>(4ull << 30));
  device.set_thread_cache(MiB);
  std::thread([&] {
    std::vector<void*> blocks;
    for (int i = 0; i < 256; ++i) blocks.push_back(device.allocate(1024));
    for (void* p : blocks) device.deallocate(p);  // 256 KiB cached (this thread's cache and the depot)
    blocks.clear();
    const Stats cached = device.stats();
    EXPECT_EQ(cached.in_use_bytes, 0u);
    for (int i = 0; i < 64; ++i) blocks.push_back(device.allocate(4096));
    const Stats s = device.stats();
    EXPECT_EQ(s.in_use_bytes, 256u * 1024) << "in use counts only what the program holds";
    EXPECT_GE(s.peak_in_use_bytes, 256u * 1024) << "the peak is below what the program held";
    EXPECT_LE(s.peak_in_use_bytes, 256u * 1024 + 256u * 1024) << "the peak is past the program's plus the cached bytes";
    for (void* p : blocks) device.deallocate(p);
  }).join();
  device.trim();
  device.reset_peaks();
  EXPECT_EQ(device.stats().peak_in_use_bytes, 0u) << "after a trim nothing is cached: the peak starts exact";
}

// A refill prepares every block it takes from the heap in the handed-out table (so a hit writes its word with one
// store); a block the table cannot hold a word for (here: past its 57 bits of address, as a leaf that cannot be mapped
// would be) sends the whole run back to the heap, and the request is declined for the device's own path: nothing
// cached, nothing counted, nothing lost.
TEST(ThreadsFront, ARunTheTableCannotPrepareGoesBackWhole) {
  class FarUpstream : public engine::FrontUpstream {
   public:
    std::size_t take_blocks(std::uint64_t size, std::size_t count, std::uint64_t* out) override {
      for (std::size_t i = 0; i < count; ++i) out[i] = next_ + i * size;
      taken += count;
      return count;
    }
    void give_back(std::span<const std::uint64_t> addrs) override { given += addrs.size(); }
    std::uint64_t next_ = std::uint64_t{1} << 60;  // beyond the table's 57 bits
    std::size_t taken = 0, given = 0;
  };
  FarUpstream upstream;
  engine::ThreadCaches front(upstream, 8 * MiB);
  EXPECT_EQ(front.allocate(256, 1), 0u) << "a block the table cannot hold must not be handed out";
  EXPECT_GT(upstream.taken, 1u) << "a run of small blocks";
  EXPECT_EQ(upstream.given, upstream.taken) << "the whole run goes back";
  const engine::FrontTotals totals = front.totals();
  EXPECT_EQ(totals.cached_blocks, 0u);
  EXPECT_EQ(totals.allocations, 0u);
  upstream.next_ = std::uint64_t{9} << 30;  // addressable again: served once the size is tried again
  for (std::int32_t i = 0; i < engine::ThreadCaches::kUnpreparableDeclines; ++i) {
    ASSERT_EQ(front.allocate(256, 1), 0u) << "declined at once after the table refused the size (request " << i << ")";
  }
  const std::uint64_t addr = front.allocate(256, 1);
  EXPECT_EQ(addr, std::uint64_t{9} << 30);
  std::uint64_t requested = 0;
  std::uint16_t tag = 0;
  EXPECT_TRUE(front.handed_out(addr, requested, tag));
  EXPECT_EQ(requested, 256u);
  EXPECT_TRUE(front.deallocate(addr));
  EXPECT_FALSE(front.handed_out(addr, requested, tag));
}

// A leaf that cannot be made keeps failing: a request that took a run from the heap, gave it back and then went to the
// device's path cost three trips of the device lock each time. After one refusal the size is declined without a trip
// (the device's path alone) for kUnpreparableDeclines requests, then tried again; other sizes, and blocks the depot
// holds (prepared when they entered the front), are not held back.
TEST(ThreadsFront, ASizeTheTableRefusedIsDeclinedWithoutATripThenTriedAgain) {
  class CountingUpstream : public engine::FrontUpstream {
   public:
    std::size_t take_blocks(std::uint64_t size, std::size_t count, std::uint64_t* out) override {
      ++trips;
      for (std::size_t i = 0; i < count; ++i) out[i] = next_ + i * size;
      next_ += ((count * size + 4095) / 4096) * 4096;
      return count;
    }
    void give_back(std::span<const std::uint64_t> addrs) override {
      ++trips;
      given += addrs.size();
    }
    std::uint64_t next_ = std::uint64_t{1} << 60;  // beyond the table's 57 bits, as a leaf that cannot be mapped
    std::size_t trips = 0, given = 0;
  };
  CountingUpstream upstream;
  engine::ThreadCaches front(upstream, 8 * MiB);
  EXPECT_EQ(front.allocate(512, 1), 0u);
  EXPECT_EQ(upstream.trips, 2u) << "the run taken and given back";
  const std::uint64_t far = upstream.next_;
  for (std::int32_t i = 0; i + 1 < engine::ThreadCaches::kUnpreparableDeclines; ++i) front.allocate(512, 1);
  EXPECT_EQ(upstream.trips, 2u) << "declined sizes must not reach the device";
  EXPECT_EQ(upstream.next_, far);
  upstream.next_ = std::uint64_t{5} << 30;  // another size, addressable: served
  const std::uint64_t other = front.allocate(1024, 1);
  EXPECT_EQ(other, std::uint64_t{5} << 30) << "only the refused size is declined";
  EXPECT_EQ(upstream.trips, 3u);
  EXPECT_EQ(front.allocate(512, 1), 0u) << "the last decline";
  EXPECT_EQ(upstream.trips, 3u);
  const std::uint64_t again = front.allocate(512, 1);  // tried again, now addressable
  EXPECT_NE(again, 0u);
  EXPECT_EQ(upstream.trips, 4u);
  EXPECT_TRUE(front.deallocate(again));
  EXPECT_TRUE(front.deallocate(other));
  const engine::FrontTotals totals = front.totals();
  EXPECT_EQ(totals.allocations, 2u);
  EXPECT_EQ(totals.frees, 2u);
  EXPECT_EQ(totals.handed_bytes, 0u);
}

}  // namespace
}  // namespace plimsoll
