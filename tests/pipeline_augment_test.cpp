// Flip, shifted crop and normalize on known images, and the seeded choice of augmentation: the same on every
// platform for a seed, about half the samples flipped, every shift in range drawn.
#include <array>
#include <climits>
#include <cstdint>
#include <limits>
#include <set>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "pipeline/splitmix64.hpp"
#include "plimsoll/datasets.hpp"
#include "plimsoll/error.hpp"

namespace plimsoll {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Bytes = std::vector<std::uint8_t>;

Bytes random_image(const ImageShape& shape, std::uint64_t seed) {
  pipeline::SplitMix64 random(seed);
  Bytes image(shape.bytes());
  for (std::uint8_t& pixel : image) pixel = static_cast<std::uint8_t>(random.next());
  return image;
}

Bytes shifted(const Bytes& src, const ImageShape& shape, int dx, int dy) {
  Bytes dst(src.size(), 0xEE);  // not zero: every byte must be written
  shifted_crop(src, dst, shape, dx, dy);
  return dst;
}

// The usual way, for comparison: pad by `pad` zeros on every side, then crop at (pad - dx, pad - dy).
Bytes pad_then_crop(const Bytes& src, const ImageShape& shape, int pad, int dx, int dy) {
  const auto rows = static_cast<int>(shape.rows);
  const auto cols = static_cast<int>(shape.cols);
  const auto channels = static_cast<int>(shape.channels);
  const int padded_cols = cols + 2 * pad;
  std::vector<std::uint8_t> padded(static_cast<std::size_t>((rows + 2 * pad) * padded_cols * channels), 0);
  for (int r = 0; r < rows; ++r) {
    for (int i = 0; i < cols * channels; ++i) {
      padded[static_cast<std::size_t>(((r + pad) * padded_cols + pad) * channels + i)] =
          src[static_cast<std::size_t>(r * cols * channels + i)];
    }
  }
  Bytes out;
  for (int r = 0; r < rows; ++r) {
    for (int i = 0; i < cols * channels; ++i) {
      out.push_back(padded[static_cast<std::size_t>(((r + pad - dy) * padded_cols + pad - dx) * channels + i)]);
    }
  }
  return out;
}

TEST(Flip, KnownImages) {
  Bytes gray{1, 2, 3, 4, 5, 6};
  flip_horizontal(gray, {2, 3, 1});
  EXPECT_THAT(gray, ElementsAre(3, 2, 1, 6, 5, 4));
  Bytes color{1, 2, 3, 4, 5, 6, 7, 8};  // one row of four two-channel pixels: channels stay together
  flip_horizontal(color, {1, 4, 2});
  EXPECT_THAT(color, ElementsAre(7, 8, 5, 6, 3, 4, 1, 2));
}

TEST(Flip, TwiceIsIdentity) {
  for (const ImageShape shape : {ImageShape{28, 28, 1}, ImageShape{5, 7, 3}, ImageShape{1, 1, 1}}) {
    const Bytes original = random_image(shape, 42);
    Bytes image = original;
    flip_horizontal(image, shape);
    if (shape.cols > 1) {
      EXPECT_NE(image, original);
    }
    flip_horizontal(image, shape);
    EXPECT_EQ(image, original);
  }
}

TEST(Flip, WrongSizeIsRejected) {
  Bytes image(5);
  try {
    flip_horizontal(image, {2, 3, 1});
    ADD_FAILURE() << "a 5-byte image of 2x3x1 was flipped";
  } catch (const InvalidArgument& error) {
    EXPECT_THAT(error.what(), HasSubstr("holds 5 bytes, not the 6 of a 2x3x1 image"));
  }
}

TEST(ShiftedCrop, KnownShifts) {
  const Bytes image{1, 2, 3, 4, 5, 6, 7, 8, 9};
  const ImageShape shape{3, 3, 1};
  EXPECT_EQ(shifted(image, shape, 0, 0), image);
  EXPECT_THAT(shifted(image, shape, 1, 0), ElementsAre(0, 1, 2, 0, 4, 5, 0, 7, 8));
  EXPECT_THAT(shifted(image, shape, -1, 1), ElementsAre(0, 0, 0, 2, 3, 0, 5, 6, 0));
  EXPECT_THAT(shifted(image, shape, 2, -2), ElementsAre(0, 0, 7, 0, 0, 0, 0, 0, 0));
  EXPECT_THAT(shifted({1, 2, 3, 4}, {1, 2, 2}, 1, 0), ElementsAre(0, 0, 1, 2));  // whole pixels move
}

TEST(ShiftedCrop, ShiftsBeyondTheImageGiveZeros) {
  const ImageShape shape{4, 5, 2};
  const Bytes image = random_image(shape, 7);
  const Bytes zeros(image.size(), 0);
  for (const auto& [dx, dy] : std::vector<std::array<int, 2>>{
           {5, 0}, {-5, 0}, {0, 4}, {0, -4}, {100, 100}, {INT_MAX, 0}, {INT_MIN, INT_MIN}, {0, INT_MAX}}) {
    EXPECT_EQ(shifted(image, shape, dx, dy), zeros) << dx << ", " << dy;
  }
  EXPECT_NE(shifted(image, shape, 4, 3), zeros);
}

TEST(ShiftedCrop, SameAsPaddingThenCropping) {
  for (const ImageShape shape : {ImageShape{28, 28, 1}, ImageShape{6, 9, 3}}) {
    const Bytes image = random_image(shape, 3);
    for (int dy = -4; dy <= 4; ++dy) {
      for (int dx = -4; dx <= 4; ++dx) {
        EXPECT_EQ(shifted(image, shape, dx, dy), pad_then_crop(image, shape, 4, dx, dy)) << dx << ", " << dy;
      }
    }
  }
}

TEST(ShiftedCrop, BadSpansAreRejected) {
  Bytes buffer(18);
  const std::span<std::uint8_t> all(buffer);
  EXPECT_THROW(shifted_crop(all.first(9), all.subspan(4, 9), {3, 3, 1}, 1, 1), InvalidArgument);  // overlap
  EXPECT_NO_THROW(shifted_crop(all.first(9), all.subspan(9, 9), {3, 3, 1}, 1, 1));
  EXPECT_THROW(shifted_crop(all.first(9), all.subspan(9, 8), {3, 3, 1}, 1, 1), InvalidArgument);
}

TEST(Normalize, Values) {
  const Bytes pixels{0, 255, 51};
  std::vector<float> out(3);
  normalize(pixels, out, 0.5F, 0.25F);
  EXPECT_FLOAT_EQ(out[0], -2.0F);
  EXPECT_FLOAT_EQ(out[1], 2.0F);
  EXPECT_FLOAT_EQ(out[2], -1.2F);
  normalize(pixels, out, 0.0F, 1.0F);
  EXPECT_FLOAT_EQ(out[2], 0.2F);
}

TEST(Normalize, BadArgumentsAreRejected) {
  const Bytes pixels{0, 255};
  std::vector<float> out(2);
  for (float stddev : {0.0F, -1.0F, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    EXPECT_THROW(normalize(pixels, out, 0.5F, stddev), InvalidArgument) << stddev;
  }
  EXPECT_THROW(normalize(pixels, out, std::numeric_limits<float>::quiet_NaN(), 1.0F), InvalidArgument);
  std::vector<float> short_out(1);
  EXPECT_THROW(normalize(pixels, short_out, 0.5F, 0.5F), InvalidArgument);
  try {
    normalize(pixels, out, 0.5F, 0.0F);
  } catch (const InvalidArgument& error) {
    EXPECT_THAT(error.what(), HasSubstr("must be above 0"));
  }
}

// splitmix64's published outputs for seed 1234567: the generator is the reference one, on this platform as on any.
TEST(Augment, GeneratorMatchesReferenceSplitMix64) {
  pipeline::SplitMix64 random(1234567);
  EXPECT_EQ(random.next(), 6457827717110365317ULL);
  EXPECT_EQ(random.next(), 3203168211198807973ULL);
  EXPECT_EQ(random.next(), 9817491932198370423ULL);
  EXPECT_EQ(random.next(), 4593380528125082431ULL);
  EXPECT_EQ(random.next(), 16408922859458223821ULL);
}

// Pinned draws (also worked out independently, in Python's unbounded integers): a change here changes every seeded
// run's augmentations.
TEST(Augment, ChoicesForASeedArePinned) {
  EXPECT_EQ(choose_augmentation(0), (Augmentation{true, -4, -3}));
  EXPECT_EQ(choose_augmentation(1), (Augmentation{true, 3, -1}));
  EXPECT_EQ(choose_augmentation(0xDEADBEEF, {.flip = true, .max_shift = 2}), (Augmentation{false, 2, 2}));
}

TEST(Augment, SameSeedSameOutput) {
  const ImageShape shape{28, 28, 1};
  const Bytes image = random_image(shape, 9);
  for (std::uint64_t seed = 0; seed < 100; ++seed) {
    Bytes first(image.size());
    Bytes second(image.size());
    EXPECT_EQ(augment_sample(image, first, shape, seed), augment_sample(image, second, shape, seed));
    EXPECT_EQ(first, second);
  }
}

TEST(Augment, DifferentSeedsDiffer) {
  const ImageShape shape{28, 28, 1};
  const Bytes image = random_image(shape, 9);
  std::set<Bytes> outputs;
  for (std::uint64_t seed = 0; seed < 100; ++seed) {
    Bytes out(image.size());
    augment_sample(image, out, shape, seed);
    outputs.insert(out);
  }
  // 162 possible augmentations (2 x 9 x 9): 100 uniform draws give about 162 x (1 - e^(-100/162)) = 75 distinct.
  EXPECT_GT(outputs.size(), 60u);
}

TEST(Augment, SampleIsTheShiftThenTheFlip) {
  const ImageShape shape{6, 5, 3};
  const Bytes image = random_image(shape, 5);
  for (std::uint64_t seed = 0; seed < 50; ++seed) {
    Bytes out(image.size());
    const Augmentation augmentation = augment_sample(image, out, shape, seed, {.flip = true, .max_shift = 2});
    Bytes expected = shifted(image, shape, augmentation.dx, augmentation.dy);
    if (augmentation.flipped) flip_horizontal(expected, shape);
    EXPECT_EQ(out, expected) << seed;
  }
}

TEST(Augment, FlipsAboutHalfAndCoversEveryShift) {
  constexpr int kSeeds = 10000;
  int flips = 0;
  std::array<int, 9> dx_counts{};
  std::array<int, 9> dy_counts{};
  for (std::uint64_t seed = 0; seed < kSeeds; ++seed) {  // consecutive seeds, as base + sample index gives
    const Augmentation augmentation = choose_augmentation(seed);
    flips += augmentation.flipped ? 1 : 0;
    ASSERT_GE(augmentation.dx, -4);
    ASSERT_LE(augmentation.dx, 4);
    ASSERT_GE(augmentation.dy, -4);
    ASSERT_LE(augmentation.dy, 4);
    ++dx_counts[static_cast<std::size_t>(augmentation.dx + 4)];
    ++dy_counts[static_cast<std::size_t>(augmentation.dy + 4)];
  }
  // Binomial(10000, 1/2) has a standard deviation of 50; each shift is expected 1111 times (sd about 31).
  EXPECT_GT(flips, 4700);
  EXPECT_LT(flips, 5300);
  for (int count : dx_counts) EXPECT_GT(count, 950);
  for (int count : dy_counts) EXPECT_GT(count, 950);
}

TEST(Augment, OptionsTurnPartsOff) {
  for (std::uint64_t seed = 0; seed < 200; ++seed) {
    const Augmentation both = choose_augmentation(seed);
    const Augmentation no_flip = choose_augmentation(seed, {.flip = false, .max_shift = 4});
    EXPECT_FALSE(no_flip.flipped);
    EXPECT_EQ(no_flip.dx, both.dx);  // the shifts do not depend on whether flipping is on
    EXPECT_EQ(no_flip.dy, both.dy);
    const Augmentation no_shift = choose_augmentation(seed, {.flip = true, .max_shift = 0});
    EXPECT_EQ(no_shift.dx, 0);
    EXPECT_EQ(no_shift.dy, 0);
    EXPECT_EQ(no_shift.flipped, both.flipped);
  }
  EXPECT_THROW(choose_augmentation(1, {.flip = true, .max_shift = -1}), InvalidArgument);
}

}  // namespace
}  // namespace plimsoll
