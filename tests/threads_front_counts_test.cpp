// The front's counts (src/engine/thread_cache.cpp): the hot paths write only the requested bytes, the allocations and
// the tag's bytes and blocks (and the cache's bytes); the handed-out bytes, the frees and the cached blocks are worked
// out by totals(). Checked here after every single operation, on every path that moves a block (a hit, a refill from
// the depot or the heap, a full bin and a full cache shedding to the depot, big blocks kept, evicted, refused and
// taken back, a flush, another thread's allocations freed here and its exit), against a
// model of what the program holds and against the heap itself. Run under TSan.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <span>
#include <thread>
#include <vector>

#include "front_heap_upstream.hpp"
#include "backings/sim_backing.hpp"
#include "engine/heap.hpp"
#include "engine/thread_cache.hpp"

namespace plimsoll {
namespace {

constexpr std::uint64_t KiB = 1ull << 10, MiB = 1ull << 20;

using test_support::HeapUpstream;

struct Held {
  std::uint64_t requested;
  std::uint16_t tag;
};

struct Model {
  std::map<std::uint64_t, Held> live;
  std::uint64_t allocations = 0, frees = 0;

  void allocated(std::uint64_t addr, std::uint64_t requested, std::uint16_t tag) {
    live[addr] = {requested, tag};
    ++allocations;
  }
  Held freed(std::uint64_t addr) {
    const Held held = live.at(addr);
    live.erase(addr);
    ++frees;
    return held;
  }
};

// Every total the front reports, against the model and the heap (no operation under way).
void expect_exact(const engine::ThreadCaches& front, HeapUpstream& upstream, const Model& model, const char* after) {
  const engine::FrontTotals totals = front.totals();
  std::uint64_t bytes = 0, requested = 0;
  std::map<std::uint16_t, engine::FrontTagCount> tags;
  for (const auto& [addr, held] : model.live) {
    const std::uint64_t size = engine::Heap::round(held.requested);
    bytes += size;
    requested += held.requested;
    tags[held.tag].bytes += size;
    tags[held.tag].live += 1;
  }
  EXPECT_EQ(totals.allocations, model.allocations) << after;
  EXPECT_EQ(totals.frees, model.frees) << after;
  EXPECT_EQ(totals.handed_live, model.live.size()) << after;
  EXPECT_EQ(totals.handed_bytes, bytes) << after;
  EXPECT_EQ(totals.handed_requested, requested) << after;
  for (std::uint16_t tag = 0; tag < 4; ++tag) {
    const engine::FrontTagCount counted = tag < totals.tags.size() ? totals.tags[tag] : engine::FrontTagCount{};
    EXPECT_EQ(counted.bytes, tags[tag].bytes) << after << ", tag " << tag;
    EXPECT_EQ(counted.live, tags[tag].live) << after << ", tag " << tag;
  }
  EXPECT_EQ(totals.cached_blocks, upstream.live_blocks() - model.live.size()) << after;
  EXPECT_EQ(totals.cached_bytes, upstream.in_use() - bytes) << after;
}

std::uint64_t draw_size(std::mt19937_64& random) {
  switch (random() % 10) {
    case 0: return 64 * KiB + random() % (MiB - 64 * KiB);  // big blocks, most of them of a size seen once
    case 1: return (1 + random() % 3) * 96 * KiB;             // big blocks of three sizes: kept and taken back
    case 2: return 60 * KiB + random() % (4 * KiB);           // the largest binned sizes: the cache fills
    default: return random() % 4096;
  }
}

TEST(ThreadsFrontCounts, EveryTotalIsExactAfterEveryOperationOnEveryPath) {
  backings::SimBacking backing(4ull << 30);
  engine::Heap heap(backing, engine::HeapOptions{.limit = 1ull << 30});
  HeapUpstream upstream(heap);
  engine::ThreadCaches front(upstream, 512 * KiB);  // small: full bins, full caches, the depot, evictions
  Model model;
  // This thread joins the front, then a second one turns big blocks on (they go through the caches from then on).
  front.count_thread();
  std::thread([&] {
    const std::uint64_t addr = front.allocate(1000, 1);
    ASSERT_NE(addr, 0u);
    model.allocated(addr, 1000, 1);
  }).join();
  ASSERT_TRUE(front.big_blocks_on());
  expect_exact(front, upstream, model, "another thread's allocation, its cache gone with it");

  std::mt19937_64 random(16);
  std::vector<std::uint64_t> held{model.live.begin()->first};
  auto free_one = [&] {
    const std::size_t i = random() % held.size();
    const std::uint64_t addr = held[i];
    held[i] = held.back();
    held.pop_back();
    model.freed(addr);
    ASSERT_TRUE(front.deallocate(addr));
  };
  for (int op = 0; op < 6000; ++op) {
    const auto choice = random() % 64;
    if (choice < 32 || held.empty()) {
      const std::uint64_t requested = draw_size(random);
      const auto tag = static_cast<std::uint16_t>(1 + random() % 3);
      const std::uint64_t addr = front.allocate(requested, tag);
      ASSERT_NE(addr, 0u) << "the heap has room for every request here";
      model.allocated(addr, requested, tag);
      held.push_back(addr);
      expect_exact(front, upstream, model, "an allocation");
    } else if (choice < 60) {
      free_one();
      expect_exact(front, upstream, model, "a free");
    } else if (choice < 61) {
      const std::uint64_t cached = front.totals().cached_blocks;
      EXPECT_EQ(front.flush(), cached) << "a flush gives back the blocks counted cached";
      expect_exact(front, upstream, model, "a flush");
    } else {
      // Another thread allocates some, frees some of this thread's (its cache counts frees of blocks it never
      // handed out: modular counts) and exits, its cache going back to the heap and its counts to the retired ones.
      std::thread([&] {
        for (int i = 0; i < 8; ++i) {
          const std::uint64_t requested = draw_size(random);
          const std::uint64_t addr = front.allocate(requested, 3);
          ASSERT_NE(addr, 0u);
          model.allocated(addr, requested, 3);
          held.push_back(addr);
        }
        for (int i = 0; i < 6 && !held.empty(); ++i) free_one();
      }).join();
      expect_exact(front, upstream, model, "another thread's operations and exit");
    }
    if (testing::Test::HasFailure()) FAIL() << "at operation " << op;
  }
  while (!held.empty()) free_one();
  expect_exact(front, upstream, model, "every block freed");
  front.flush();
  EXPECT_EQ(front.totals().cached_blocks, 0u);
  EXPECT_EQ(upstream.live_blocks(), 0u);
}

}  // namespace
}  // namespace plimsoll
