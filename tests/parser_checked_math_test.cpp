// util/checked_math.hpp: the one copy of overflow-checked and aligned arithmetic (sizes parsed from user input,
// pipeline byte counts, granule rounding).
#include "util/checked_math.hpp"

#include <cstdint>
#include <limits>

#include <gtest/gtest.h>

namespace plimsoll::util {
namespace {

constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();

TEST(CheckedMath, AddFitsUpToTheLastValueAndRefusesOnePast) {
  EXPECT_EQ(checked_add(2, 3), 5u);
  EXPECT_EQ(checked_add(kMax - 1, 1), kMax);
  EXPECT_EQ(checked_add(kMax, 0), kMax);
  EXPECT_FALSE(checked_add(kMax, 1));
  EXPECT_FALSE(checked_add(kMax / 2 + 1, kMax / 2 + 1));
}

TEST(CheckedMath, MultiplyFitsUpToTheLastValueAndRefusesOnePast) {
  EXPECT_EQ(checked_multiply(6, 7), 42u);
  EXPECT_EQ(checked_multiply(0, kMax), 0u);
  EXPECT_EQ(checked_multiply(kMax, 1), kMax);
  constexpr std::uint64_t k2to32 = std::uint64_t{1} << 32;
  EXPECT_EQ(checked_multiply(k2to32, k2to32 - 1), kMax - (k2to32 - 1));
  EXPECT_FALSE(checked_multiply(k2to32, k2to32));
  EXPECT_FALSE(checked_multiply(kMax, 2));
}

TEST(CheckedMath, SaturatingSumsAndDifferencesStopAtTheEnds) {
  EXPECT_EQ(saturating_add(2, 3), 5u);
  EXPECT_EQ(saturating_add(kMax - 1, 1), kMax);
  EXPECT_EQ(saturating_add(kMax - 1, 5), kMax);
  EXPECT_EQ(saturating_subtract(5, 3), 2u);
  EXPECT_EQ(saturating_subtract(3, 5), 0u);
  EXPECT_EQ(saturating_subtract(kMax, kMax), 0u);
}

TEST(CheckedMath, RoundingToAnyMultiple) {
  EXPECT_EQ(round_down(10, 3), 9u);
  EXPECT_EQ(round_down(9, 3), 9u);
  EXPECT_EQ(round_up(10, 3), 12u);
  EXPECT_EQ(round_up(9, 3), 9u);
  EXPECT_EQ(round_up(0, 3), 0u);
  EXPECT_EQ(round_up(1, 1), 1u);
  // Near the top: the remainder form does not wrap where (value + multiple - 1) would.
  EXPECT_EQ(round_up(kMax - 2, 3), kMax);  // kMax is a multiple of 3
  EXPECT_EQ(round_down(kMax, 1u << 20), kMax - ((1u << 20) - 1));
}

TEST(CheckedMath, CheckedRoundUpRefusesWhatDoesNotFit) {
  EXPECT_EQ(checked_round_up(65, 64), 128u);
  EXPECT_EQ(checked_round_up(128, 64), 128u);
  EXPECT_EQ(checked_round_up(kMax, 1), kMax);
  EXPECT_EQ(checked_round_up(kMax - 63, 64), kMax - 63);  // 2^64 - 64: a multiple already
  EXPECT_EQ(checked_round_up(kMax - 126, 64), kMax - 63);
  EXPECT_EQ(checked_round_up(kMax - 62, 64), std::nullopt);  // the next multiple of 64 is 2^64
  EXPECT_FALSE(checked_round_up(kMax, 2));
}

TEST(CheckedMath, PowerOfTwoAlignment) {
  EXPECT_TRUE(is_power_of_two(1));
  EXPECT_TRUE(is_power_of_two(std::uint64_t{1} << 63));
  EXPECT_FALSE(is_power_of_two(0));
  EXPECT_FALSE(is_power_of_two(3 << 20));

  constexpr std::uint64_t kGranule = 2 << 20;
  EXPECT_EQ(align_up(1, kGranule), kGranule);
  EXPECT_EQ(align_up(kGranule, kGranule), kGranule);
  EXPECT_EQ(align_up(kGranule + 1, kGranule), 2 * kGranule);
  EXPECT_EQ(align_up(0, kGranule), 0u);
  EXPECT_EQ(align_down(2 * kGranule - 1, kGranule), kGranule);
  EXPECT_EQ(align_down(kGranule - 1, kGranule), 0u);
  EXPECT_TRUE(is_aligned(0, kGranule));
  EXPECT_TRUE(is_aligned(3 * kGranule, kGranule));
  EXPECT_FALSE(is_aligned(3 * kGranule + 4096, kGranule));
  // The mask and the division agree on powers of two.
  for (std::uint64_t value : {0ull, 1ull, 4095ull, 4096ull, 4097ull, 123456789ull}) {
    EXPECT_EQ(align_up(value, 4096), round_up(value, 4096)) << value;
    EXPECT_EQ(align_down(value, 4096), round_down(value, 4096)) << value;
  }
}

// Usable in constant expressions, as granule arithmetic is.
static_assert(align_up(5, 4) == 8 && round_up(5, 3) == 6 && checked_add(1, 2) == 3u && !checked_multiply(kMax, 3));

}  // namespace
}  // namespace plimsoll::util
