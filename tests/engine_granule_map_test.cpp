// GranuleMap::count_unmapped and all_mapped work a word at a time; these tests hold them to a granule-at-a-time count.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>

#include "engine/granule_map.hpp"

namespace plimsoll::engine {
namespace {

std::uint64_t count_one_by_one(const GranuleMap& map, std::uint64_t first, std::uint64_t last) {
  std::uint64_t unmapped = 0;
  for (std::uint64_t g = first; g < last; ++g) unmapped += map.is_mapped(g) ? 0u : 1u;
  return unmapped;
}

TEST(EngineGranuleMap, CountUnmappedAtWordEdges) {
  constexpr std::uint64_t kGranules = 256;
  GranuleMap map(1ull << 30, kGranules << 21, 1ull << 21);
  map.set(63, 2, true);    // straddles the first word boundary
  map.set(128, 64, true);  // exactly the third word
  map.set(255, 1, true);   // the last granule
  EXPECT_EQ(map.count_unmapped(0, kGranules), kGranules - 67);
  EXPECT_EQ(map.count_unmapped(63, 65), 0u);
  EXPECT_EQ(map.count_unmapped(62, 66), 2u);
  EXPECT_EQ(map.count_unmapped(64, 64), 0u);  // empty range
  EXPECT_EQ(map.count_unmapped(128, 192), 0u);
  EXPECT_EQ(map.count_unmapped(127, 193), 2u);
  EXPECT_EQ(map.count_unmapped(255, 256), 0u);
  EXPECT_EQ(map.count_unmapped(0, 1), 1u);
  EXPECT_EQ(map.count_unmapped(64, 128), 63u);  // granule 64 mapped, the rest of the second word not
  EXPECT_TRUE(map.all_mapped(63, 65));
  EXPECT_FALSE(map.all_mapped(62, 65));
  EXPECT_FALSE(map.all_mapped(63, 66));
  EXPECT_TRUE(map.all_mapped(64, 64));  // empty range
  EXPECT_TRUE(map.all_mapped(128, 192));
  EXPECT_FALSE(map.all_mapped(127, 192));
  EXPECT_FALSE(map.all_mapped(128, 193));
  EXPECT_TRUE(map.all_mapped(255, 256));
  EXPECT_FALSE(map.all_mapped(0, kGranules));
}

TEST(EngineGranuleMap, AllMappedAcrossWholeWords) {
  GranuleMap map(1ull << 30, 512ull << 21, 1ull << 21);
  map.set(10, 300, true);  // four words: partial, whole, whole, whole, partial
  EXPECT_TRUE(map.all_mapped(10, 310));
  EXPECT_FALSE(map.all_mapped(9, 310));
  EXPECT_FALSE(map.all_mapped(10, 311));
  map.set(200, 1, false);  // a hole in a middle word
  EXPECT_FALSE(map.all_mapped(10, 310));
  EXPECT_TRUE(map.all_mapped(10, 200));
  EXPECT_TRUE(map.all_mapped(201, 310));
}

TEST(EngineGranuleMap, CountUnmappedMatchesAGranuleAtATimeOnRandomMaps) {
  std::mt19937_64 random(16);
  for (int round = 0; round < 50; ++round) {
    const std::uint64_t granules = 1 + random() % 700;
    GranuleMap map(1ull << 32, granules << 21, 1ull << 21);
    for (int run = 0; run < 20; ++run) {
      const std::uint64_t first = random() % granules;
      const std::uint64_t count = 1 + random() % (granules - first);
      bool free_run = true;
      for (std::uint64_t g = first; g < first + count; ++g) free_run = free_run && !map.is_mapped(g);
      if (free_run) map.set(first, count, true);  // set() is only ever given runs in the other state
    }
    for (int query = 0; query < 200; ++query) {
      const std::uint64_t a = random() % (granules + 1), b = random() % (granules + 1);
      const std::uint64_t first = std::min(a, b), last = std::max(a, b);
      ASSERT_EQ(map.count_unmapped(first, last), count_one_by_one(map, first, last))
          << "granules " << granules << ", range [" << first << ", " << last << ")";
      ASSERT_EQ(map.all_mapped(first, last), count_one_by_one(map, first, last) == 0)
          << "granules " << granules << ", range [" << first << ", " << last << ")";
    }
  }
}

}  // namespace
}  // namespace plimsoll::engine
