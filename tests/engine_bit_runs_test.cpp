// util/bit_runs.hpp, the word-at-a-time walk over granule bitmaps that GranuleMap (the heap's mapped granules) and
// MappingLedger (a backing's book) share: runs and counts across word edges, at the range's ends, in empty and full
// words, against a bit-at-a-time reference over every range of a few patterns; and the word-wise store.
#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "util/bit_runs.hpp"

namespace plimsoll::util {
namespace {

using Runs = std::vector<std::pair<std::uint64_t, std::uint64_t>>;

bool bit(const std::vector<std::uint64_t>& words, std::uint64_t i) { return ((words[i / 64] >> (i % 64)) & 1U) != 0; }

Runs runs_of(const std::vector<std::uint64_t>& words, std::uint64_t first, std::uint64_t last, bool value) {
  Runs runs;
  for_each_bit_run(words.data(), first, last, value, [&](std::uint64_t at, std::uint64_t count) {
    runs.emplace_back(at, count);
  });
  return runs;
}

Runs reference_runs(const std::vector<std::uint64_t>& words, std::uint64_t first, std::uint64_t last, bool value) {
  Runs runs;
  for (std::uint64_t i = first; i < last; ++i) {
    if (bit(words, i) != value) continue;
    if (!runs.empty() && runs.back().first + runs.back().second == i) ++runs.back().second;
    else runs.emplace_back(i, 1);
  }
  return runs;
}

void set_bits(std::vector<std::uint64_t>& words, std::uint64_t first, std::uint64_t last) {
  for (std::uint64_t i = first; i < last; ++i) words[i / 64] |= std::uint64_t{1} << (i % 64);
}

TEST(EngineBitRuns, ARunAcrossAWordEdgeIsOneRun) {
  std::vector<std::uint64_t> words(4, 0);
  set_bits(words, 60, 70);    // crosses the first edge
  set_bits(words, 128, 192);  // exactly the third word
  EXPECT_EQ(runs_of(words, 0, 256, true), (Runs{{60, 10}, {128, 64}}));
  EXPECT_EQ(runs_of(words, 0, 256, false), (Runs{{0, 60}, {70, 58}, {192, 64}}));
  EXPECT_EQ(count_set_bits(words.data(), 0, 256), 74u);
}

TEST(EngineBitRuns, RunsAreCutAtTheRangesEnds) {
  std::vector<std::uint64_t> words(3, ~std::uint64_t{0});
  EXPECT_EQ(runs_of(words, 5, 190, true), (Runs{{5, 185}}));
  EXPECT_TRUE(runs_of(words, 5, 190, false).empty());
  EXPECT_EQ(runs_of(words, 64, 64, true), Runs{});
  EXPECT_EQ(count_set_bits(words.data(), 63, 65), 2u);
  EXPECT_EQ(count_set_bits(words.data(), 7, 7), 0u);
  EXPECT_EQ(find_bit(words.data(), 10, 100, false), 100u);
}

TEST(EngineBitRuns, EmptyWordsAreSkippedAndTheLastBitCounts) {
  std::vector<std::uint64_t> words(1000, 0);
  words.back() = std::uint64_t{1} << 63;  // the very last bit
  EXPECT_EQ(runs_of(words, 0, 64000, true), (Runs{{63999, 1}}));
  EXPECT_EQ(runs_of(words, 0, 63999, true), Runs{});
  EXPECT_EQ(count_set_bits(words.data(), 0, 64000), 1u);
}

TEST(EngineBitRuns, MatchesABitAtATimeWalkOverEveryRange) {
  const std::vector<std::vector<std::uint64_t>> patterns = {
      {0x8000000000000001ull, 0x0000000000000001ull, 0x8000000000000000ull},
      {0xF0F0F0F0F0F0F0F0ull, ~std::uint64_t{0}, 0, 0x5555555555555555ull},
      {~std::uint64_t{0} << 1, ~std::uint64_t{0} >> 1, 0x00000000FFFF0000ull},
  };
  for (const auto& words : patterns) {
    const std::uint64_t bits = words.size() * 64;
    for (std::uint64_t first = 0; first <= bits; first += 3) {
      for (std::uint64_t last = first; last <= bits; last += 5) {
        for (const bool value : {true, false})
          ASSERT_EQ(runs_of(words, first, last, value), reference_runs(words, first, last, value))
              << first << ".." << last << " of " << value;
        std::uint64_t set = 0;
        for (std::uint64_t i = first; i < last; ++i) set += bit(words, i) ? 1U : 0U;
        ASSERT_EQ(count_set_bits(words.data(), first, last), set) << first << ".." << last;
      }
    }
  }
}

// assign_bits stores what a bit-at-a-time loop stores, over every range of a mixed pattern, both ways, and leaves
// the bits outside the range as they were.
TEST(EngineBitRuns, AssignBitsMatchesABitAtATimeStore) {
  const std::vector<std::uint64_t> pattern = {0xF0F0F0F0F0F0F0F0ull, 0, ~std::uint64_t{0}, 0x5555555555555555ull};
  const std::uint64_t bits = pattern.size() * 64;
  for (std::uint64_t first = 0; first <= bits; first += 3) {
    for (std::uint64_t last = first; last <= bits; last += 7) {
      for (const bool value : {true, false}) {
        std::vector<std::uint64_t> words = pattern, expected = pattern;
        assign_bits(words.data(), first, last, value);
        for (std::uint64_t i = first; i < last; ++i) {
          const std::uint64_t mask = std::uint64_t{1} << (i % 64);
          expected[i / 64] = value ? expected[i / 64] | mask : expected[i / 64] & ~mask;
        }
        ASSERT_EQ(words, expected) << first << ".." << last << " to " << value;
      }
    }
  }
}

}  // namespace
}  // namespace plimsoll::util
