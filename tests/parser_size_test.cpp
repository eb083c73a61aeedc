#include <cstdint>
#include <limits>
#include <random>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "plimsoll/error.hpp"
#include "plimsoll/size.hpp"

namespace plimsoll {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr std::uint64_t kKiB = 1024;
constexpr std::uint64_t kMiB = kKiB * 1024;
constexpr std::uint64_t kGiB = kMiB * 1024;
constexpr std::uint64_t kTiB = kGiB * 1024;
constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();

std::string rejection_of(const std::string& text) {
  try {
    const std::uint64_t bytes = parse_size(text);
    ADD_FAILURE() << '"' << text << "\" was accepted as " << bytes;
  } catch (const InvalidArgument& error) {
    return error.what();
  }
  return {};
}

TEST(ParseSize, BareBytes) {
  EXPECT_EQ(parse_size("0"), 0u);
  EXPECT_EQ(parse_size("512"), 512u);
  EXPECT_EQ(parse_size("1048576"), 1048576u);
  EXPECT_EQ(parse_size("007"), 7u);
  EXPECT_EQ(parse_size("18446744073709551615"), kMax);
}

TEST(ParseSize, BinaryUnitsArePowersOf1024) {
  EXPECT_EQ(parse_size("1KiB"), kKiB);
  EXPECT_EQ(parse_size("1MiB"), kMiB);
  EXPECT_EQ(parse_size("1GiB"), kGiB);
  EXPECT_EQ(parse_size("1TiB"), kTiB);
  EXPECT_EQ(parse_size("16GiB"), 16 * kGiB);
  EXPECT_EQ(parse_size("3B"), 3u);
}

TEST(ParseSize, DecimalUnitsArePowersOf1000) {
  EXPECT_EQ(parse_size("1KB"), 1000u);
  EXPECT_EQ(parse_size("1MB"), 1000u * 1000);
  EXPECT_EQ(parse_size("1GB"), 1000u * 1000 * 1000);
  EXPECT_EQ(parse_size("2TB"), 2'000'000'000'000u);
}

TEST(ParseSize, UnitsIgnoreCase) {
  EXPECT_EQ(parse_size("16gib"), 16 * kGiB);
  EXPECT_EQ(parse_size("16GIB"), 16 * kGiB);
  EXPECT_EQ(parse_size("16gIb"), 16 * kGiB);
  EXPECT_EQ(parse_size("64kb"), 64'000u);
  EXPECT_EQ(parse_size("5b"), 5u);
}

TEST(ParseSize, OneBlankMayPrecedeTheUnit) {
  EXPECT_EQ(parse_size("16 GiB"), 16 * kGiB);
  EXPECT_EQ(parse_size("1.5 GB"), 1'500'000'000u);
  EXPECT_EQ(parse_size("512 B"), 512u);
  for (const char* text : {"16  GiB", "16\tGiB", "16 ", " 16", "16GiB ", " 16GiB", "16 GiB\n"}) {
    EXPECT_THAT(rejection_of(text), StartsWith("invalid size")) << text;
  }
}

TEST(ParseSize, FractionsWithAUnitRoundDownToWholeBytes) {
  EXPECT_EQ(parse_size("1.5GiB"), kGiB + kGiB / 2);
  EXPECT_EQ(parse_size("1.5GB"), 1'500'000'000u);
  EXPECT_EQ(parse_size("0.5KiB"), 512u);
  EXPECT_EQ(parse_size("0.1GiB"), 107'374'182u);      // 107374182.4
  EXPECT_EQ(parse_size("1.0001KiB"), 1024u);          // 1024.1024
  EXPECT_EQ(parse_size("0.999KiB"), 1022u);           // 1022.976
  EXPECT_EQ(parse_size("0.0000000000001TB"), 0u);     // a tenth of a byte
  EXPECT_EQ(parse_size("1.000000000000TB"), 1'000'000'000'000u);
  EXPECT_EQ(parse_size("1.23456789KB"), 1234u);
}

TEST(ParseSize, LongFractionsAreExact) {
  // Just under 3 TiB, by less than a byte: doubles would round this up to 3 TiB exactly.
  EXPECT_EQ(parse_size("2.99999999999999999999999999TiB"), 3 * kTiB - 1);
  EXPECT_EQ(parse_size("0.00000000000000000000000001TiB"), 0u);
}

TEST(ParseSize, AFractionNeedsAUnitOtherThanBytes) {
  EXPECT_THAT(rejection_of("1.5"), HasSubstr("fraction"));
  EXPECT_THAT(rejection_of("1.5B"), HasSubstr("fraction"));
  EXPECT_THAT(rejection_of("1.5 b"), HasSubstr("fraction"));
}

TEST(ParseSize, RejectsJunk) {
  for (const char* text : {"", "GiB", "1e9", "0x10", "+5", "1,5GiB", "16G", "16K", "16GiBs", "1.GiB", ".5GiB",
                           "1..5GiB", "1.5.5GiB", "sixteen", "16 parsecs", "16PiB", "16iB", "\xd9\xa1\xd9\xa2"}) {
    EXPECT_THAT(rejection_of(text), StartsWith("invalid size")) << text;
  }
  EXPECT_THAT(rejection_of(std::string("16\0GiB", 6)), StartsWith("invalid size"));
}

TEST(ParseSize, RejectsNegativeSizes) {
  EXPECT_THAT(rejection_of("-1"), HasSubstr("negative"));
  EXPECT_THAT(rejection_of("-1GiB"), HasSubstr("negative"));
  EXPECT_THAT(rejection_of("-0"), HasSubstr("negative"));
}

TEST(ParseSize, RejectsSizesPast64Bits) {
  EXPECT_THAT(rejection_of("18446744073709551616"), HasSubstr("larger than the largest size"));
  EXPECT_THAT(rejection_of("99999999999999999999999999"), HasSubstr("larger"));
  EXPECT_THAT(rejection_of("16777216TiB"), HasSubstr("larger"));  // exactly 2^64
  EXPECT_EQ(parse_size("16777215TiB"), 16777215 * kTiB);
  // The fraction alone can carry it over the edge.
  EXPECT_EQ(parse_size("18446744073.709551615GB"), kMax);
  EXPECT_THAT(rejection_of("18446744073.709551616GB"), HasSubstr("larger"));
  EXPECT_EQ(parse_size("16777215.99999999999999999999999TiB"), kMax);  // 2^64 less a sliver: rounds down
  EXPECT_EQ(parse_size("16777215.999999999999TiB"), kMax - 1);         // 2^64 - 1.0995...
}

TEST(ParseSize, MessageNamesTheTextAndTheAcceptedForms) {
  const std::string message = rejection_of("12 parsecs");
  EXPECT_THAT(message, AllOf(StartsWith("invalid size \"12 parsecs\": "), HasSubstr("unknown unit \"parsecs\""),
                             HasSubstr("expected a whole number of bytes or a number with a unit (KiB MiB GiB TiB = "
                                       "powers of 1024; KB MB GB TB = powers of 1000), e.g. 512, 16GiB, 1.5GB")));
}

TEST(ParseSize, ErrorIsAnInvalidArgument) {
  EXPECT_THROW(parse_size("lots"), InvalidArgument);
  EXPECT_THROW(parse_size(""), Error);
}

TEST(FormatSize, SmallSizesInBytes) {
  EXPECT_EQ(format_size(0), "0 B");
  EXPECT_EQ(format_size(512), "512 B");
  EXPECT_EQ(format_size(1023), "1023 B");
}

TEST(FormatSize, LargerSizesInTheLargestBinaryUnitWithTwoDecimals) {
  EXPECT_EQ(format_size(1024), "1.00 KiB");
  EXPECT_EQ(format_size(1536), "1.50 KiB");
  EXPECT_EQ(format_size(16 * kGiB), "16.00 GiB");
  EXPECT_EQ(format_size(kGiB + kGiB / 4), "1.25 GiB");
  EXPECT_EQ(format_size(kTiB), "1.00 TiB");
  EXPECT_EQ(format_size(5000 * kTiB), "5000.00 TiB");
  EXPECT_EQ(format_size(kMax), "16777216.00 TiB");
}

TEST(FormatSize, RoundsToTheNearestHundredth) {
  EXPECT_EQ(format_size(1024 + 5), "1.00 KiB");     // 1.0049
  EXPECT_EQ(format_size(1024 + 6), "1.01 KiB");     // 1.0059
  EXPECT_EQ(format_size(2047), "2.00 KiB");         // 1.999
  EXPECT_EQ(format_size(kMiB - 1), "1.00 MiB");     // 1023.999 KiB moves up a unit
  EXPECT_EQ(format_size(kMiB - 11), "1023.99 KiB");
}

TEST(SizeRoundTrip, BareBytesParseBack) {
  std::mt19937_64 random(20240601);
  for (int i = 0; i < 2000; ++i) {
    const std::uint64_t bytes = random() >> (random() % 64);
    ASSERT_EQ(parse_size(std::to_string(bytes)), bytes);
  }
}

TEST(SizeRoundTrip, FormattedSizesParseBackWithinRounding) {
  std::mt19937_64 random(7);
  for (int i = 0; i < 2000; ++i) {
    const std::uint64_t bytes = random() >> (random() % 64);
    if (bytes > kMax - kTiB) continue;  // rounds up to 16777216.00 TiB, one past the largest size
    const std::string text = format_size(bytes);
    const std::uint64_t parsed = parse_size(text);
    const std::uint64_t error = parsed > bytes ? parsed - bytes : bytes - parsed;
    ASSERT_LE(error, bytes / 200 + 1) << bytes << " -> " << text << " -> " << parsed;
  }
}

}  // namespace
}  // namespace plimsoll
