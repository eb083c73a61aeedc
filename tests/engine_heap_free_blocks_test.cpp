// Heap::for_each_free_large (src/engine/heap.hpp): the free blocks of the reservation found through the free bins,
// which the step plan's growth path (PlanFollower::place_above_plan) searches instead of walking every block. It
// must visit exactly what a walk of the whole heap finds free, outside small pages, and at least the size asked.
#include <gtest/gtest.h>

#include <random>
#include <set>
#include <utility>
#include <vector>

#include "backings/sim_backing.hpp"
#include "engine/heap.hpp"

namespace plimsoll::engine {
namespace {

constexpr std::uint64_t MiB = 1ull << 20;

TEST(EngineHeapFreeBlocks, FreeBinsFindExactlyTheFreeBlocksAWalkFinds) {
  backings::SimBacking backing(4ull << 30);
  Heap heap(backing, HeapOptions{.limit = 1ull << 30});
  std::mt19937_64 random(7);
  std::vector<std::uint64_t> live;
  std::size_t large_free_seen = 0;
  for (int round = 0; round < 2000; ++round) {
    if (live.empty() || random() % 3 != 0) {
      const std::uint64_t bytes = random() % 2 == 0 ? 256 + random() % 4096 : 64 * 1024 + random() % (4 * MiB);
      if (const std::uint64_t addr = heap.allocate(bytes, 1)) live.push_back(addr);
    } else {
      const std::size_t pick = random() % live.size();
      Heap::Freed freed;
      ASSERT_TRUE(heap.deallocate(live[pick], freed));
      live[pick] = live.back();
      live.pop_back();
    }
    if (round % 100 != 99) continue;
    for (const std::uint64_t min_size : {std::uint64_t{0}, std::uint64_t{256}, MiB, 3 * MiB}) {
      std::set<std::pair<std::uint64_t, std::uint64_t>> walked, binned;
      heap.walk([&](const BlockView& block) {
        if (block.free && !block.small && block.size >= min_size) walked.emplace(block.addr, block.size);
      });
      heap.for_each_free_large(min_size, [&](const BlockView& block) {
        EXPECT_TRUE(block.free);
        EXPECT_FALSE(block.small);
        EXPECT_TRUE(binned.emplace(block.addr, block.size).second) << "a free block visited twice";
      });
      ASSERT_EQ(binned, walked) << "round " << round << ", at least " << min_size << " bytes";
      if (min_size >= MiB) large_free_seen += binned.size();
    }
  }
  EXPECT_GT(large_free_seen, 20u) << "the heap never had large free blocks to find: the test checks nothing";
}

}  // namespace
}  // namespace plimsoll::engine
