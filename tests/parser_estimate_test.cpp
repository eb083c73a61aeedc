// The estimator's input parsers: sample shapes, dtype names and whole-number options. Each bad input must be an
// InvalidArgument that quotes the value and says what to write instead.
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "plimsoll/error.hpp"
#include "plimsoll/estimate.hpp"

namespace plimsoll {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();

std::string shape_rejection(const std::string& text) {
  try {
    const BatchShape shape = parse_shape(text);
    ADD_FAILURE() << '"' << text << "\" was accepted as " << shape.to_string();
  } catch (const InvalidArgument& error) {
    return error.what();
  }
  return {};
}

std::string count_rejection(const std::string& text, std::uint64_t minimum) {
  try {
    const std::uint64_t value = parse_count(text, "--batch", minimum);
    ADD_FAILURE() << '"' << text << "\" was accepted as " << value;
  } catch (const InvalidArgument& error) {
    return error.what();
  }
  return {};
}

TEST(ParseShape, DimensionsJoinedByX) {
  EXPECT_THAT(parse_shape("224x224x3").dims, ElementsAre(224u, 224u, 3u));
  EXPECT_THAT(parse_shape("3x224x224").dims, ElementsAre(3u, 224u, 224u));
  EXPECT_THAT(parse_shape("512").dims, ElementsAre(512u));
  EXPECT_THAT(parse_shape("16x3x112x112").dims, ElementsAre(16u, 3u, 112u, 112u));
}

TEST(ParseShape, ElementsAndTextRoundTrip) {
  const BatchShape shape = parse_shape("224x224x3");
  EXPECT_EQ(shape.elements(), 150528u);
  EXPECT_EQ(shape.to_string(), "224x224x3");
  EXPECT_EQ(parse_shape("1").elements(), 1u);
}

TEST(ParseShape, MissingDimensionIsNamed) {
  EXPECT_THAT(shape_rejection("224x"), AllOf(HasSubstr("\"224x\""), HasSubstr("dimension 2 is missing"),
                                             HasSubstr("e.g. 224x224x3")));
  EXPECT_THAT(shape_rejection("x3"), HasSubstr("dimension 1 is missing"));
  EXPECT_THAT(shape_rejection("224xx3"), HasSubstr("dimension 2 is missing"));
  EXPECT_THAT(shape_rejection(""), HasSubstr("empty"));
}

TEST(ParseShape, ZeroDimensionIsRejected) {
  EXPECT_THAT(shape_rejection("0x3"), AllOf(HasSubstr("\"0x3\""), HasSubstr("dimension 1 is 0"),
                                            HasSubstr("at least 1")));
  EXPECT_THAT(shape_rejection("224x224x0"), HasSubstr("dimension 3 is 0"));
}

TEST(ParseShape, NonNumbersAreRejected) {
  EXPECT_THAT(shape_rejection("abc"), AllOf(HasSubstr("\"abc\""), HasSubstr("not a whole number")));
  EXPECT_THAT(shape_rejection("224x2.5"), HasSubstr("dimension 2 (\"2.5\") is not a whole number"));
  EXPECT_THAT(shape_rejection("224 x 224"), HasSubstr("not a whole number"));
  EXPECT_THAT(shape_rejection("224*224"), HasSubstr("not a whole number"));
  EXPECT_THAT(shape_rejection("+3"), HasSubstr("not a whole number"));
}

TEST(ParseShape, NegativeDimensionIsRejected) {
  EXPECT_THAT(shape_rejection("-3"), HasSubstr("dimension 1 (-3) is negative"));
  EXPECT_THAT(shape_rejection("3x-3"), HasSubstr("dimension 2 (-3) is negative"));
}

TEST(ParseShape, OverflowIsDetectedNotWrapped) {
  EXPECT_EQ(parse_shape("18446744073709551615").elements(), kMax);
  EXPECT_THAT(shape_rejection("18446744073709551616"), HasSubstr("dimension 1 (18446744073709551616) is 2^64"));
  // 2^32 x 2^32 is 2^64 exactly: wrapped, it would be 0 elements.
  EXPECT_THAT(shape_rejection("4294967296x4294967296"), AllOf(HasSubstr("4294967296x4294967296"),
                                                              HasSubstr("2^64 elements")));
  EXPECT_EQ(parse_shape("4294967296x4294967295").elements(), 4294967296u * 4294967295u);
}

TEST(ParseDType, CanonicalNamesAndSizes) {
  EXPECT_EQ(parse_dtype("float32"), DType::float32);
  EXPECT_EQ(parse_dtype("float16"), DType::float16);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::bfloat16);
  EXPECT_EQ(parse_dtype("uint8"), DType::uint8);
  EXPECT_EQ(parse_dtype("int64"), DType::int64);
  EXPECT_EQ(dtype_bytes(DType::float32), 4u);
  EXPECT_EQ(dtype_bytes(DType::float16), 2u);
  EXPECT_EQ(dtype_bytes(DType::bfloat16), 2u);
  EXPECT_EQ(dtype_bytes(DType::uint8), 1u);
  EXPECT_EQ(dtype_bytes(DType::int64), 8u);
}

TEST(ParseDType, NamesRoundTrip) {
  for (DType dtype : {DType::float32, DType::float16, DType::bfloat16, DType::uint8, DType::int64}) {
    EXPECT_EQ(parse_dtype(to_string(dtype)), dtype) << to_string(dtype);
  }
  EXPECT_EQ(to_string(DType::bfloat16), "bfloat16");
}

TEST(ParseDType, AliasesAndCase) {
  EXPECT_EQ(parse_dtype("fp32"), DType::float32);
  EXPECT_EQ(parse_dtype("fp16"), DType::float16);
  EXPECT_EQ(parse_dtype("bf16"), DType::bfloat16);
  EXPECT_EQ(parse_dtype("Float32"), DType::float32);
  EXPECT_EQ(parse_dtype("BF16"), DType::bfloat16);
}

TEST(ParseDType, UnknownNameListsTheAcceptedOnes) {
  try {
    parse_dtype("float8");
    ADD_FAILURE() << "float8 was accepted";
  } catch (const InvalidArgument& error) {
    EXPECT_THAT(error.what(), AllOf(HasSubstr("\"float8\""), HasSubstr("float32"), HasSubstr("bfloat16"),
                                    HasSubstr("uint8"), HasSubstr("int64")));
  }
  EXPECT_THROW(parse_dtype(""), InvalidArgument);
  EXPECT_THROW(parse_dtype("float32 "), InvalidArgument);
}

TEST(ParseCount, WholeNumbers) {
  EXPECT_EQ(parse_count("128", "--batch", 1), 128u);
  EXPECT_EQ(parse_count("0", "--queue"), 0u);
  EXPECT_EQ(parse_count("18446744073709551615", "--queue"), kMax);
}

TEST(ParseCount, BadValuesNameTheOptionAndTheValue) {
  EXPECT_THAT(count_rejection("-1", 1), AllOf(HasSubstr("--batch -1 is negative"), HasSubstr("at least 1")));
  EXPECT_THAT(count_rejection("0", 1), AllOf(HasSubstr("--batch 0"), HasSubstr("at least 1")));
  EXPECT_THAT(count_rejection("abc", 0), HasSubstr("--batch \"abc\" is not a whole number"));
  EXPECT_THAT(count_rejection("1.5", 0), HasSubstr("\"1.5\" is not a whole number"));
  EXPECT_THAT(count_rejection("12k", 0), HasSubstr("\"12k\""));
  EXPECT_THAT(count_rejection("", 0), HasSubstr("--batch is empty"));
  EXPECT_THAT(count_rejection("18446744073709551616", 0), HasSubstr("18446744073709551616 is 2^64 or more"));
}

}  // namespace
}  // namespace plimsoll
