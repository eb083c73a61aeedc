// The handed-out table's region summary (src/engine/handed_table.hpp): a word is read only where a front block
// ever started, and marking never hides a word.
#include <gtest/gtest.h>

#include <cstdint>

#include "engine/handed_table.hpp"

namespace {

using plimsoll::engine::HandedTable;

constexpr std::uint64_t kBase = std::uint64_t{7} << 30;  // a leaf of its own
constexpr std::uint64_t kRegion = std::uint64_t{1} << HandedTable::kRegionShift;

TEST(EngineHandedTable, AWordInAMarkedRegionIsReadAndCleared) {
  HandedTable table;
  const std::uint64_t addr = kBase + 3 * kRegion + 512;
  ASSERT_TRUE(table.mark(addr));
  EXPECT_TRUE(table.marked(addr));
  ASSERT_TRUE(table.set(addr, HandedTable::word(300, 5)));
  const std::uint64_t w = table.get(addr);
  ASSERT_TRUE(HandedTable::handed(w));
  EXPECT_EQ(HandedTable::requested(w), 300u);
  EXPECT_EQ(HandedTable::tag(w), 5u);
  table.clear(addr);
  EXPECT_EQ(table.get(addr), 0u);
  EXPECT_TRUE(table.marked(addr));  // regions stay marked: their words may be set again without a new mark
}

TEST(EngineHandedTable, AnUnmarkedRegionAnswersZeroWithoutReadingItsWords) {
  HandedTable table;
  const std::uint64_t marked = kBase + 5 * kRegion;
  ASSERT_TRUE(table.mark(marked));
  // The next region, in the same leaf and the same summary word: its words are not consulted until it is marked.
  const std::uint64_t neighbour = marked + kRegion;
  EXPECT_FALSE(table.marked(neighbour));
  ASSERT_TRUE(table.set(neighbour, HandedTable::word(256, 1)));  // breaks set()'s contract on purpose
  EXPECT_EQ(table.get(neighbour), 0u);
  ASSERT_TRUE(table.mark(neighbour));
  EXPECT_TRUE(HandedTable::handed(table.get(neighbour)));
  // Marking one region marks no other: the last region of the leaf and the first of the next leaf stay clear.
  EXPECT_FALSE(table.marked(kBase + (std::uint64_t{1} << 30) - kRegion));
  EXPECT_FALSE(table.marked(kBase + (std::uint64_t{1} << 30)));
  EXPECT_FALSE(table.marked(kBase + 69 * kRegion));  // same bit in the next summary word
}

TEST(EngineHandedTable, EveryRegionOfALeafHasItsOwnBit) {
  HandedTable table;
  for (std::uint64_t r = 0; r < (std::uint64_t{1} << 30) / kRegion; r += 97) ASSERT_TRUE(table.mark(kBase + r * kRegion));
  for (std::uint64_t r = 0; r < (std::uint64_t{1} << 30) / kRegion; ++r)
    ASSERT_EQ(table.marked(kBase + r * kRegion + kRegion - 256), r % 97 == 0) << "region " << r;
}

TEST(EngineHandedTable, AddressesOffTheQuantumAreNeverMarkedOrRead) {
  HandedTable table;
  EXPECT_FALSE(table.mark(kBase + 1));
  EXPECT_FALSE(table.marked(kBase + 1));
  EXPECT_EQ(table.get(kBase + 1), 0u);
  EXPECT_FALSE(table.mark(std::uint64_t{1} << 60));
}

}  // namespace
