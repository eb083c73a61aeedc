// Heap::self_check (src/engine/heap_check.cpp): silent on a heap driven at random, and naming the invariant when
// one is broken on purpose. The sanitizer builds run it inside the heap every 1024 operations.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "backings/sim_backing.hpp"
#include "engine/heap.hpp"
#include "sanitized.hpp"

namespace plimsoll::engine {

struct HeapTestAccess {
  static HeapCounters& counters(Heap& heap) { return heap.counters_; }
  static GranuleMap& granules(Heap& heap) { return heap.granules_; }
  static FreeBins& large_bins(Heap& heap) { return heap.large_bins_; }
  static BlockPool& blocks(Heap& heap) { return heap.blocks_; }
};

namespace {

constexpr std::uint64_t MiB = 1ull << 20;

TEST(EngineSelfCheck, SilentOnAHeapDrivenAtRandom) {
  backings::SimBacking backing(4ull << 30);
  Heap heap(backing, HeapOptions{.limit = 256 * MiB, .release_threshold = 64 * MiB});
  std::mt19937_64 random(7);
  std::vector<std::uint64_t> live;
  for (int op = 0; op < 20000; ++op) {
    if (live.empty() || random() % 2) {
      const std::uint64_t bytes = random() % 4 == 0 ? random() % (8 * MiB) : random() % 8192;
      if (std::uint64_t addr = heap.allocate(bytes, 1)) live.push_back(addr);
    } else {
      const std::size_t pick = random() % live.size();
      Heap::Freed freed;
      ASSERT_TRUE(heap.deallocate(live[pick], freed));
      live[pick] = live.back();
      live.pop_back();
    }
    if (op % 97 == 0) {
      ASSERT_EQ(heap.self_check(), "") << "after operation " << op;
    }
  }
  heap.release_cached();
  EXPECT_EQ(heap.self_check(), "");
}

class BrokenHeap : public ::testing::Test {
 protected:
  backings::SimBacking backing{4ull << 30};
  Heap heap{backing, HeapOptions{.limit = 64 * MiB}};
  std::uint64_t small = heap.allocate(1000, 1);
  std::uint64_t large = heap.allocate(3 * MiB, 1);
};

TEST_F(BrokenHeap, CountersThatDisagreeWithTheBlocks) {
  ASSERT_EQ(heap.self_check(), "");
  HeapTestAccess::counters(heap).in_use += 256;
  EXPECT_NE(heap.self_check().find("in-use bytes"), std::string::npos) << heap.self_check();
  HeapTestAccess::counters(heap).in_use -= 256;  // the heap's destructor must find it whole
  EXPECT_EQ(heap.self_check(), "");
}

TEST_F(BrokenHeap, AUsedBlockThatIsNotMapped) {
  GranuleMap& granules = HeapTestAccess::granules(heap);
  granules.set(granules.first_covering(large), 1, false);
  EXPECT_NE(heap.self_check().find("not mapped"), std::string::npos) << heap.self_check();
  granules.set(granules.first_covering(large), 1, true);
  EXPECT_EQ(heap.self_check(), "");
}

TEST_F(BrokenHeap, AFreeBlockMissingFromTheBins) {
  FreeBins& bins = HeapTestAccess::large_bins(heap);
  BlockIndex any = kNoBlock;
  bins.for_each(HeapTestAccess::blocks(heap), [&](BlockIndex i) { any = i; });
  ASSERT_NE(any, kNoBlock);
  bins.remove(HeapTestAccess::blocks(heap), any);
  EXPECT_NE(heap.self_check().find("bins"), std::string::npos) << heap.self_check();
  bins.insert(HeapTestAccess::blocks(heap), any);
  EXPECT_EQ(heap.self_check(), "");
}

TEST(EngineSelfCheck, OnInSanitizerBuilds) {
#if defined(PLIMSOLL_SANITIZED)
  EXPECT_TRUE(heap_self_check_enabled()) << "PLIMSOLL_SANITIZE should turn PLIMSOLL_HEAP_SELF_CHECK on";
#else
  GTEST_SKIP() << "not a sanitizer build; the self-check is "
               << (heap_self_check_enabled() ? "on" : "off") << " (PLIMSOLL_HEAP_SELF_CHECK)";
#endif
}

}  // namespace
}  // namespace plimsoll::engine
