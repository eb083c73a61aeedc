// The handed-out table's region summary (src/engine/handed_table.hpp): set() marks the 64 KiB region of the word it
// writes, get() reads words only in marked regions, and no region is marked by another's word. Wide blocks (over
// 64 KiB) keep one word per region, exact to the block's start. prepare() makes a block's word writable with one
// store (set_prepared), as the per-thread caches do on a hit, and find() keeps the leaf a free then clears in.
#include <gtest/gtest.h>

#include <cstdint>

#include "engine/handed_table.hpp"

namespace {

using plimsoll::engine::HandedTable;

constexpr std::uint64_t kBase = std::uint64_t{7} << 30;  // a leaf of its own
constexpr std::uint64_t kRegion = std::uint64_t{1} << HandedTable::kRegionShift;
constexpr std::uint64_t kLeafRegions = (std::uint64_t{1} << 30) / kRegion;

TEST(EngineHandedTable, SetMarksItsRegionAndTheWordReadsBack) {
  HandedTable table;
  const std::uint64_t addr = kBase + 3 * kRegion + 512;
  EXPECT_FALSE(table.marked(addr));
  EXPECT_EQ(table.get(addr), 0u);
  ASSERT_TRUE(table.set(addr, HandedTable::word(300, 5)));
  EXPECT_TRUE(table.marked(addr));
  EXPECT_TRUE(table.marked(kBase + 3 * kRegion));  // the whole 64 KiB region
  const std::uint64_t w = table.get(addr);
  ASSERT_TRUE(HandedTable::handed(w));
  EXPECT_EQ(HandedTable::requested(w), 300u);
  EXPECT_EQ(HandedTable::tag(w), 5u);
  table.clear(addr, w);
  EXPECT_EQ(table.get(addr), 0u);
  EXPECT_TRUE(table.marked(addr));  // regions stay marked: a region's words may be set again at any time
  ASSERT_TRUE(table.set(addr, HandedTable::word(256, 1)));
  EXPECT_TRUE(HandedTable::handed(table.get(addr)));
}

TEST(EngineHandedTable, OneRegionsWordMarksNoOtherRegion) {
  HandedTable table;
  const std::uint64_t addr = kBase + 5 * kRegion;
  ASSERT_TRUE(table.set(addr, HandedTable::word(256, 1)));
  EXPECT_FALSE(table.marked(addr - 256));           // the region below
  EXPECT_FALSE(table.marked(addr + kRegion));       // the region above: the next byte of marks
  EXPECT_FALSE(table.marked(addr + 64 * kRegion));  // 64 regions up (a word of two-bit marks, before)
  EXPECT_FALSE(table.marked(kBase + (std::uint64_t{1} << 30) + 5 * kRegion));  // the same region of the next leaf
  EXPECT_EQ(table.get(addr + kRegion), 0u);
  EXPECT_EQ(table.get(addr + 256), 0u);  // same region, another word: marked, and clear
}

TEST(EngineHandedTable, EveryRegionOfALeafHasItsOwnMarks) {
  HandedTable table;
  for (std::uint64_t r = 0; r < kLeafRegions; r += 97) ASSERT_TRUE(table.set(kBase + r * kRegion, HandedTable::word(1, 0)));
  for (std::uint64_t r = 0; r < kLeafRegions; ++r) {
    ASSERT_EQ(table.marked(kBase + r * kRegion + kRegion - 256), r % 97 == 0) << "region " << r;
    ASSERT_EQ(HandedTable::handed(table.get(kBase + r * kRegion)), r % 97 == 0) << "region " << r;
  }
}

TEST(EngineHandedTable, AddressesOffTheQuantumAreNeverMarkedOrRead) {
  HandedTable table;
  EXPECT_FALSE(table.set(kBase + 1, HandedTable::word(1, 0)));
  EXPECT_FALSE(table.marked(kBase + 1));
  EXPECT_EQ(table.get(kBase + 1), 0u);
  EXPECT_FALSE(table.set(std::uint64_t{1} << 60, HandedTable::word(1, 0)));
}

TEST(EngineHandedTable, AWideBlockHasItsRegionsWordExactToItsStart) {
  HandedTable table;
  const std::uint64_t requested = kRegion + 1;  // over 64 KiB: a wide block
  ASSERT_TRUE(HandedTable::wide(requested));
  ASSERT_FALSE(HandedTable::wide(kRegion));
  const std::uint64_t addr = kBase + 9 * kRegion + 768;
  ASSERT_TRUE(table.set(addr, HandedTable::word(requested, 7)));
  const std::uint64_t w = table.get(addr);
  ASSERT_TRUE(HandedTable::handed(w));
  EXPECT_EQ(w, HandedTable::word(requested, 7)) << "the offset kept beside it must not show in the word read back";
  EXPECT_FALSE(table.marked(addr)) << "a wide block must not mark the small blocks' region";
  EXPECT_EQ(table.get(addr - 256), 0u) << "same region, another start: not this block";
  EXPECT_EQ(table.get(addr + 256), 0u);
  EXPECT_EQ(table.get(kBase + 9 * kRegion), 0u);
  EXPECT_EQ(table.get(addr + kRegion), 0u) << "the next region has no wide word";
  // A small block starting in the same region (below the wide one) has a word of its own.
  const std::uint64_t small = kBase + 9 * kRegion;
  ASSERT_TRUE(table.set(small, HandedTable::word(512, 3)));
  EXPECT_EQ(table.get(small), HandedTable::word(512, 3));
  EXPECT_EQ(table.get(addr), HandedTable::word(requested, 7));
  table.clear(addr, w);
  EXPECT_EQ(table.get(addr), 0u);
  EXPECT_EQ(table.get(small), HandedTable::word(512, 3)) << "clearing the wide word left the small one";
  // The region's next wide block may start elsewhere in it.
  ASSERT_TRUE(table.set(addr + 4096, HandedTable::word(1 << 20, 2)));
  EXPECT_EQ(table.get(addr), 0u);
  EXPECT_EQ(table.get(addr + 4096), HandedTable::word(1 << 20, 2));
}

// The caches prepare a block when it enters the front and write its word on every hit with set_prepared, which reads
// no region mark: the word is readable only because prepare() marked the region (for the kind of block it said).
TEST(EngineHandedTable, PrepareMarksTheRegionThatASetPreparedWordIsReadIn) {
  HandedTable table;
  const std::uint64_t addr = kBase + 11 * kRegion + 1024;
  ASSERT_TRUE(table.prepare(addr, false));
  EXPECT_TRUE(table.marked(addr));
  EXPECT_EQ(table.get(addr), 0u) << "prepared is not handed out";
  HandedTable::set_prepared(table.prepared_leaf(addr, false), addr, HandedTable::word(700, 4));
  EXPECT_EQ(table.get(addr), HandedTable::word(700, 4));
  const HandedTable::Found found = table.find(addr);
  EXPECT_EQ(found.word, HandedTable::word(700, 4));
  ASSERT_NE(found.leaf, nullptr);
  HandedTable::clear_in(found.leaf, addr, found.word);
  EXPECT_EQ(table.get(addr), 0u);
  HandedTable::set_prepared(table.prepared_leaf(addr, false), addr, HandedTable::word(256, 1));  // prepared stays prepared
  EXPECT_EQ(table.get(addr), HandedTable::word(256, 1));

  // A wide block is prepared with its region's wide bit, not the plain one (a heap free there reads no plain word).
  const std::uint64_t wide = kBase + 13 * kRegion + 512;
  ASSERT_TRUE(table.prepare(wide, true));
  EXPECT_FALSE(table.marked(wide));
  HandedTable::set_prepared(table.prepared_leaf(wide, true), wide, HandedTable::word(kRegion + 256, 6));
  EXPECT_EQ(table.get(wide), HandedTable::word(kRegion + 256, 6));
  EXPECT_EQ(table.find(wide).word, HandedTable::word(kRegion + 256, 6));

  EXPECT_FALSE(table.prepare(kBase + 3, false)) << "off the quantum: no word to prepare";
  EXPECT_EQ(table.find(kBase + 3).leaf, nullptr);
}

// The leaves last made are looked up in a small direct-mapped array before the radix walk. Leaves whose keys share a
// slot replace each other there: each address must still read and write its own word, and an address whose slot
// holds another leaf, or in a leaf never made, must read nothing.
TEST(EngineHandedTable, LeavesSharingARecentSlotReadTheirOwnWords) {
  HandedTable table;
  constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;
  const std::uint64_t first = kBase + 2 * kRegion;  // key 7
  const std::uint64_t same_slot = first + 16 * kGiB, other_slot = first + 3 * kGiB, never = first + 32 * kGiB;
  ASSERT_TRUE(table.set(first, HandedTable::word(300, 1)));
  ASSERT_TRUE(table.prepare(same_slot, false));  // replaces the first leaf in its slot
  HandedTable::set_prepared(table.prepared_leaf(same_slot, false), same_slot, HandedTable::word(600, 2));
  ASSERT_TRUE(table.set(other_slot, HandedTable::word(900, 3)));
  EXPECT_EQ(table.get(first), HandedTable::word(300, 1)) << "a leaf replaced in its slot must still be found";
  EXPECT_EQ(table.get(same_slot), HandedTable::word(600, 2)) << "the other leaf's word landed in the wrong leaf";
  EXPECT_EQ(table.get(other_slot), HandedTable::word(900, 3));
  EXPECT_EQ(table.get(never), 0u);
  EXPECT_EQ(table.find(never).leaf, nullptr);
  EXPECT_EQ(table.get(kRegion), 0u) << "key 0: an empty slot must match no key";
  const HandedTable::Found found = table.find(same_slot);
  HandedTable::clear_in(found.leaf, same_slot, found.word);
  EXPECT_EQ(table.get(same_slot), 0u);
  EXPECT_EQ(table.get(first), HandedTable::word(300, 1));
  EXPECT_NE(table.prepared_leaf(first, false), table.prepared_leaf(same_slot, false));
}

// prepared_leaf() trusts that prepare() ran for the address; where assertions are on (the sanitizer builds), an address
// never prepared aborts with a message instead of a store through a null leaf, or a word set in a region no free reads.
TEST(EngineHandedTableDeathTest, AnUnpreparedAddressAbortsWhereAssertionsAreOn) {
#ifdef NDEBUG
  GTEST_SKIP() << "built with NDEBUG: prepared_leaf() checks its contract only where assertions are on";
#else
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  HandedTable table;
  EXPECT_DEATH(table.prepared_leaf(kBase + 9 * kRegion, false), "never prepared") << "no leaf made";
  ASSERT_TRUE(table.prepare(kBase, false));
  EXPECT_DEATH(table.prepared_leaf(kBase + 9 * kRegion, false), "never prepared") << "a leaf made, the region unmarked";
  EXPECT_EQ(table.prepared_leaf(kBase + 256, false), table.prepared_leaf(kBase, false)) << "a prepared region passes";
  // A region marked only wide holds no plain word a heap free reads: a plain word prepared there is the same defect.
  const std::uint64_t wide = kBase + 11 * kRegion;
  ASSERT_TRUE(table.prepare(wide, true));
  EXPECT_EQ(table.prepared_leaf(wide, true), table.prepared_leaf(kBase, false)) << "the wide bit for a wide word";
  EXPECT_DEATH(table.prepared_leaf(wide + 4096, false), "never prepared") << "a plain word in a wide-only region";
#endif
}

}  // namespace
