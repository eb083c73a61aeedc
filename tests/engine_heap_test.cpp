// Unit tests of the engine's mechanisms, each on a simulated device so nothing is touched.
#include <gtest/gtest.h>

#include <vector>

#include "backings/sim_backing.hpp"
#include "engine/heap.hpp"
#include "engine_heap_checker.hpp"

namespace plimsoll::engine {
namespace {

constexpr std::uint64_t MiB = 1ull << 20;
constexpr std::uint64_t GiB = 1ull << 30;

HeapOptions exact(std::uint64_t limit, bool preallocate, double growth_factor) {
  HeapOptions options;
  options.limit = limit;
  options.preallocate = preallocate;
  options.growth_factor = growth_factor;
  return options;
}

// Growth factor 1 by default: these tests count granules exactly.
struct Fixture {
  explicit Fixture(std::uint64_t limit, bool preallocate = false, std::uint64_t capacity = 16 * GiB,
                   double growth_factor = 1.0)
      : sim(capacity), heap(sim, exact(limit, preallocate, growth_factor)), check(heap) {}
  std::uint64_t alloc(std::uint64_t bytes) {
    std::uint64_t addr = heap.allocate(bytes, 0);
    if (addr) check.allocated(addr, bytes);
    return addr;
  }
  void free(std::uint64_t addr) {
    Heap::Freed freed;
    ASSERT_TRUE(heap.deallocate(addr, freed));
    check.freed(addr);
  }
  backings::SimBacking sim;
  Heap heap;
  testing::HeapChecker check;
};

TEST(EngineHeap, RoundsToQuantumAndAligns) {
  EXPECT_EQ(Heap::round(0), 256u);
  EXPECT_EQ(Heap::round(1), 256u);
  EXPECT_EQ(Heap::round(256), 256u);
  EXPECT_EQ(Heap::round(257), 512u);
  Fixture f(1 * GiB);
  std::uint64_t a = f.alloc(0), b = f.alloc(0);
  EXPECT_NE(a, b) << "zero-byte allocations must be distinct";
  f.check.walk();
}

TEST(EngineHeap, CoalescesBothNeighbours) {
  Fixture f(1 * GiB);
  std::uint64_t a = f.alloc(4 * MiB), b = f.alloc(4 * MiB), c = f.alloc(4 * MiB), d = f.alloc(4 * MiB);
  EXPECT_EQ(b, a + 4 * MiB) << "large blocks fill from the low end";
  f.free(a);
  f.free(c);
  f.check.walk();
  f.free(b);  // joins a and c
  f.check.walk();
  std::uint64_t big = f.alloc(12 * MiB);
  EXPECT_EQ(big, a) << "the coalesced 12 MiB hole is the best fit";
  f.free(big);
  f.free(d);
  f.check.walk();
}

TEST(EngineHeap, BestFitPrefersTheSmallestHole) {
  Fixture f(1 * GiB);
  std::uint64_t a = f.alloc(8 * MiB), sep1 = f.alloc(MiB * 2), b = f.alloc(3 * MiB), sep2 = f.alloc(2 * MiB);
  f.free(a);
  f.free(b);
  EXPECT_EQ(f.alloc(3 * MiB), b) << "the 3 MiB hole fits exactly";
  EXPECT_EQ(f.alloc(5 * MiB), a);
  (void)sep1;
  (void)sep2;
  f.check.walk();
}

TEST(EngineHeap, SmallRequestsShareAPageThatIsReturnedWhenEmpty) {
  Fixture f(1 * GiB);
  std::vector<std::uint64_t> small;
  for (int i = 0; i < 100; ++i) small.push_back(f.alloc(1000));
  f.check.walk();
  EXPECT_EQ(f.check.pages().size(), 1u);
  EXPECT_EQ(f.heap.mapped_bytes(), 2 * MiB);
  for (auto addr : small) f.free(addr);
  f.check.walk();
  EXPECT_TRUE(f.check.pages().empty()) << "an empty small page goes back to the large class";
  EXPECT_EQ(f.heap.free_bytes_small(), 0u);
}

TEST(EngineHeap, OnDemandMapsLazilyAndNeverPassesTheLimit) {
  Fixture f(64 * MiB);
  EXPECT_EQ(f.heap.mapped_bytes(), 0u);
  std::uint64_t a = f.alloc(30 * MiB);
  EXPECT_EQ(f.heap.mapped_bytes(), 30 * MiB);
  std::uint64_t b = f.alloc(30 * MiB);
  EXPECT_NE(b, 0u);
  EXPECT_EQ(f.alloc(8 * MiB), 0u) << "64 MiB limit, 60 MiB mapped: 8 more do not fit";
  EXPECT_EQ(f.heap.last_failure(), HeapFailure::limit);
  f.check.walk();
  f.free(a);
  f.free(b);
}

// The backing may have less room than the heap's limit (a GPU share's cap, other processes): a refused map ahead
// must not refuse a request that fits by itself.
TEST(EngineHeap, ARefusedMapAheadFallsBackToWhatTheRequestNeeds) {
  Fixture f(100 * MiB, false, /*capacity=*/60 * MiB, 2.0);
  const std::uint64_t a = f.alloc(10 * MiB);
  EXPECT_EQ(f.heap.mapped_bytes(), 20 * MiB);
  const std::uint64_t b = f.alloc(40 * MiB);  // ahead would make 100 MiB, the device has 60
  ASSERT_NE(b, 0u) << "50 MiB fit in the device's 60 MiB";
  EXPECT_EQ(f.heap.mapped_bytes(), 50 * MiB);
  EXPECT_EQ(f.alloc(20 * MiB), 0u) << "70 MiB do not";
  EXPECT_EQ(f.heap.last_failure(), HeapFailure::device);
  f.check.walk();
  f.free(a);
  f.free(b);
}

TEST(EngineHeap, GrowthMapsAheadGeometricallyButNeverPastTheLimit) {
  Fixture f(100 * MiB, false, 16 * GiB, 2.0);
  std::uint64_t a = f.alloc(10 * MiB);
  EXPECT_EQ(f.heap.mapped_bytes(), 20 * MiB) << "needs 10 MiB, maps twice that";
  EXPECT_EQ(f.heap.counters().maps, 1u);
  std::uint64_t b = f.alloc(8 * MiB);
  EXPECT_EQ(f.heap.counters().maps, 1u) << "the next 8 MiB land in what was mapped ahead";
  std::uint64_t c = f.alloc(40 * MiB);
  EXPECT_EQ(f.heap.mapped_bytes(), 100 * MiB) << "116 MiB would pass the 100 MiB limit: capped";
  f.check.walk();
  f.free(a);
  f.free(b);
  f.free(c);
  f.check.walk();
}

TEST(EngineHeap, NearTheLimitGrowthTakesTheRestOfTheBudget) {
  Fixture f(100 * MiB, false, 16 * GiB, 1.1);
  std::uint64_t a = f.alloc(60 * MiB);
  EXPECT_EQ(f.heap.mapped_bytes(), 66 * MiB) << "needs 60 MiB, maps 10% ahead";
  std::uint64_t b = f.alloc(20 * MiB);
  EXPECT_EQ(f.heap.mapped_bytes(), 88 * MiB) << "needs 80 MiB, maps 10% ahead; 88 x 1.1 is still below 100";
  std::uint64_t c = f.alloc(10 * MiB);
  EXPECT_EQ(f.heap.mapped_bytes(), 100 * MiB) << "needs 90 MiB; 99 x 1.1 passes the limit, so it takes all 100";
  EXPECT_EQ(f.heap.counters().maps, 3u);
  f.check.walk();
  f.free(a);
  f.free(b);
  f.free(c);
}

TEST(EngineHeap, GrowthPrefersMappedMemoryOverAnUnmappedBestFit) {
  Fixture f(1 * GiB);
  std::uint64_t a = f.alloc(4 * MiB);  // 0-4 MiB
  std::uint64_t b = f.alloc(2 * MiB);  // 4-6 MiB
  f.free(a);
  f.heap.release_cached();              // the 4 MiB hole at 0 is now unmapped
  std::uint64_t c = f.alloc(6 * MiB);  // 6-12 MiB
  std::uint64_t d = f.alloc(2 * MiB);  // 12-14 MiB
  f.free(c);                            // a 6 MiB hole, still mapped
  const std::uint64_t maps = f.heap.counters().maps;
  std::uint64_t e = f.alloc(3 * MiB);
  EXPECT_EQ(f.heap.counters().maps, maps) << "the 4 MiB hole fits best but would need mapping; the 6 MiB one is mapped";
  EXPECT_GE(e, c);
  EXPECT_LE(e + 3 * MiB, c + 6 * MiB);
  f.check.walk();
  f.free(b);
  f.free(d);
  f.free(e);
}

TEST(EngineHeap, AtTheLimitGivesBackOnlyTheCachedGranulesItNeeds) {
  Fixture f(64 * MiB);
  std::uint64_t a = f.alloc(40 * MiB);
  std::uint64_t keep = f.alloc(4 * MiB);
  f.free(a);  // a 40 MiB hole below `keep`, cached (still mapped)
  EXPECT_EQ(f.heap.mapped_bytes(), 44 * MiB);
  // 50 MiB does not fit in the 40 MiB hole; growing would pass the limit, unless the cache is released.
  std::uint64_t b = f.alloc(50 * MiB);
  ASSERT_NE(b, 0u);
  EXPECT_GE(f.heap.counters().unmaps, 1u);
  // 54 MiB live; the other 10 MiB of the hole stay cached, since the limit leaves room for them.
  EXPECT_EQ(f.heap.mapped_bytes(), 64 * MiB);
  EXPECT_EQ(f.sim.mapped_bytes(), 64 * MiB);
  f.check.walk();
  f.free(b);
  f.free(keep);
}

TEST(EngineHeap, ReleaseCachedUnmapsOnlyWholeFreeGranules) {
  Fixture f(1 * GiB);
  std::uint64_t a = f.alloc(3 * MiB);           // granules 0..1
  std::uint64_t b = f.alloc(6 * MiB);           // 3..9 MiB: shares granule 1 with a
  std::uint64_t c = f.alloc(MiB * 3);           // 9..12 MiB
  f.free(b);
  EXPECT_EQ(f.heap.release_cached(), 4 * MiB) << "only the granules at 4-6 MiB and 6-8 MiB lie wholly in the hole";
  f.check.walk();
  f.free(a);
  f.free(c);
  f.heap.release_cached();
  EXPECT_EQ(f.heap.mapped_bytes(), 0u);
  EXPECT_EQ(f.sim.mapped_bytes(), 0u);
}

TEST(EngineHeap, PreallocateMapsTheBudgetOnceAndKeepsIt) {
  Fixture f(256 * MiB, /*preallocate=*/true);
  EXPECT_EQ(f.heap.mapped_bytes(), 256 * MiB);
  EXPECT_EQ(f.heap.counters().maps, 1u);
  std::uint64_t a = f.alloc(100 * MiB);
  f.free(a);
  EXPECT_EQ(f.heap.release_cached(), 0u);
  EXPECT_EQ(f.heap.mapped_bytes(), 256 * MiB);
  EXPECT_EQ(f.alloc(300 * MiB), 0u);
  f.check.walk();
}

TEST(EngineHeap, DeviceRefusalIsAnOutOfMemoryNotACrash) {
  Fixture f(8 * GiB, false, 1 * GiB);  // the limit is above what the device has
  f.sim.set_occupied_by_others(900 * MiB);
  EXPECT_EQ(f.alloc(200 * MiB), 0u);
  EXPECT_EQ(f.heap.last_failure(), HeapFailure::device);
  EXPECT_EQ(f.heap.mapped_bytes(), 0u) << "a failed map leaves nothing mapped";
  EXPECT_NE(f.alloc(100 * MiB), 0u);
  f.check.walk();
}

TEST(EngineHeap, UnknownAndDoubleFreesChangeNothing) {
  Fixture f(1 * GiB);
  std::uint64_t a = f.alloc(1000);
  Heap::Freed freed;
  EXPECT_FALSE(f.heap.deallocate(a + 256, freed));
  f.free(a);
  EXPECT_FALSE(f.heap.deallocate(a, freed));
  f.check.walk();
}

// The allocator frees the program's blocks with kFrontTag refused (a block the per-thread caches hold is free for the
// program): the refusal must leave the block live and everything else untouched, and other tags free as before.
TEST(EngineHeap, AFreeOfARefusedTagChangesNothing) {
  Fixture f(1 * GiB);
  constexpr std::uint16_t kHeld = 0xFFFF;
  const std::uint64_t small = f.heap.allocate(1000, kHeld), large = f.heap.allocate(3 * MiB, kHeld);
  ASSERT_NE(small, 0u);
  ASSERT_NE(large, 0u);
  f.check.allocated(small, 1000);
  f.check.allocated(large, 3 * MiB);
  const std::uint64_t mine = f.alloc(5 * MiB);
  const HeapCounters before = f.heap.counters();
  Heap::Freed freed;
  EXPECT_FALSE(f.heap.deallocate(small, freed, kHeld));
  EXPECT_FALSE(f.heap.deallocate(large, freed, kHeld));
  EXPECT_EQ(f.heap.counters().in_use, before.in_use);
  EXPECT_EQ(f.heap.counters().frees, before.frees);
  EXPECT_EQ(f.heap.live_allocations(), 3u);
  f.check.walk();
  ASSERT_TRUE(f.heap.deallocate(mine, freed, kHeld));  // another tag: freed, in the same call
  f.check.freed(mine);
  EXPECT_EQ(freed.size, 5 * MiB);
  f.free(small);  // without a refused tag, the held blocks free as any other
  f.free(large);
  EXPECT_EQ(f.heap.live_allocations(), 0u);
  f.check.walk();
}

TEST(EngineHeap, ARequestLargerThanTheAddressSpaceFails) {
  Fixture f(64 * MiB);
  EXPECT_EQ(f.heap.allocate(1ull << 62, 0), 0u);
  EXPECT_EQ(f.heap.last_failure(), HeapFailure::too_large);
}

// map_ranges' `keep`: when room must be made under the limit, cached granules marked kept are never given back,
// though the cheapest run to give back (the first in the free block) is one of them (a transition step keeps the
// granules of its planned ranges for the steps after it: PlanFollower::follow_transition).
TEST(EngineHeap, MapRangesNeverGivesBackAKeptGranule) {
  backings::SimBacking sim(8 * GiB);
  Heap heap(sim, exact(3 * 2 * MiB, false, 1.0));
  const std::uint64_t granule = heap.granules().granule();
  ASSERT_EQ(granule, 2 * MiB);
  const std::uint64_t base = heap.base();
  std::vector<std::uint64_t> blocks;
  for (std::uint64_t k = 0; k < 3; ++k) {
    const std::uint64_t addr = heap.allocate_at(base + k * granule, granule, 0);
    ASSERT_EQ(addr, base + k * granule);
    blocks.push_back(addr);
  }
  for (const std::uint64_t addr : blocks) {
    Heap::Freed freed;
    ASSERT_TRUE(heap.deallocate(addr, freed));
  }
  ASSERT_EQ(heap.mapped_bytes(), 3 * granule) << "three cached granules, the limit's worth";
  std::vector<bool> keep(heap.span_bytes() / granule + 1, false);
  keep[0] = keep[1] = true;
  ASSERT_TRUE(heap.map_ranges({{base + 10 * granule, granule}}, &keep));
  EXPECT_TRUE(heap.granules().is_mapped(0)) << "kept";
  EXPECT_TRUE(heap.granules().is_mapped(1)) << "kept";
  EXPECT_FALSE(heap.granules().is_mapped(2)) << "the one not kept is given back";
  EXPECT_TRUE(heap.granules().is_mapped(10));
  EXPECT_EQ(heap.mapped_bytes(), 3 * granule);
  EXPECT_EQ(heap.self_check(), "");
  // With every cached granule kept there is no room: nothing changes.
  keep[2] = true;
  EXPECT_FALSE(heap.map_ranges({{base + 20 * granule, granule}}, &keep));
  EXPECT_EQ(heap.mapped_bytes(), 3 * granule);
}

}  // namespace
}  // namespace plimsoll::engine
