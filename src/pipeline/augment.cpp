// The augmentations of small-image training (flip, shifted crop, normalize) on one row-major image, and their
// random choice drawn from a seed the same way on every platform.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string_view>

#include <fmt/format.h>

#include "pipeline/splitmix64.hpp"
#include "plimsoll/datasets.hpp"
#include "plimsoll/error.hpp"

namespace plimsoll {
namespace {

void check_image(std::size_t size, const ImageShape& shape, std::string_view what) {
  if (size != shape.bytes()) {
    throw InvalidArgument(fmt::format("{} holds {} bytes, not the {} of a {}x{}x{} image; give rows x cols x "
                                      "channels bytes",
                                      what, size, shape.bytes(), shape.rows, shape.cols, shape.channels));
  }
}

}  // namespace

void flip_horizontal(std::span<std::uint8_t> image, const ImageShape& shape) {
  check_image(image.size(), shape, "the image to flip");
  const std::size_t pixel = shape.channels;
  const std::size_t row_bytes = std::size_t{shape.cols} * pixel;
  for (std::size_t row = 0; row < shape.rows; ++row) {
    std::uint8_t* left = image.data() + row * row_bytes;
    std::uint8_t* right = left + row_bytes - pixel;
    for (; left < right; left += pixel, right -= pixel) std::swap_ranges(left, left + pixel, right);
  }
}

void shifted_crop(std::span<const std::uint8_t> src, std::span<std::uint8_t> dst, const ImageShape& shape, int dx,
                  int dy) {
  check_image(src.size(), shape, "the source of shifted_crop");
  check_image(dst.size(), shape, "the destination of shifted_crop");
  const std::less<const std::uint8_t*> before;
  if (!src.empty() && before(src.data(), dst.data() + dst.size()) && before(dst.data(), src.data() + src.size())) {
    throw InvalidArgument("shifted_crop's source and destination overlap; give a separate destination");
  }
  const auto rows = std::int64_t{shape.rows};
  const auto cols = std::int64_t{shape.cols};
  const auto pixel = std::size_t{shape.channels};
  const std::size_t row_bytes = static_cast<std::size_t>(cols) * pixel;
  // Destination columns [first, last) receive source columns [first - dx, last - dx); the rest are 0.
  const std::int64_t first = std::clamp<std::int64_t>(dx, 0, cols);
  const std::int64_t last = std::clamp<std::int64_t>(cols + std::int64_t{dx}, 0, cols);
  for (std::int64_t row = 0; row < rows; ++row) {
    std::uint8_t* out = dst.data() + static_cast<std::size_t>(row) * row_bytes;
    const std::int64_t from = row - dy;
    if (from < 0 || from >= rows || first >= last) {
      std::fill_n(out, row_bytes, std::uint8_t{0});
      continue;
    }
    const std::uint8_t* in = src.data() + static_cast<std::size_t>(from) * row_bytes;
    const auto head = static_cast<std::size_t>(first) * pixel;
    const auto body = static_cast<std::size_t>(last - first) * pixel;
    std::fill_n(out, head, std::uint8_t{0});
    std::copy_n(in + static_cast<std::size_t>(first - dx) * pixel, body, out + head);
    std::fill_n(out + head + body, row_bytes - head - body, std::uint8_t{0});
  }
}

void normalize(std::span<const std::uint8_t> src, std::span<float> dst, float mean, float stddev) {
  if (src.size() != dst.size()) {
    throw InvalidArgument(fmt::format("normalize: {} bytes in, room for {} floats out; give spans of one size",
                                      src.size(), dst.size()));
  }
  if (!std::isfinite(mean) || !std::isfinite(stddev) || !(stddev > 0.0F)) {
    throw InvalidArgument(fmt::format("normalize: mean {} and standard deviation {}; the standard deviation must be "
                                      "above 0 and both finite (Fashion-MNIST: mean 0.2860, std 0.3530)",
                                      mean, stddev));
  }
  for (std::size_t i = 0; i < src.size(); ++i) dst[i] = (static_cast<float>(src[i]) / 255.0F - mean) / stddev;
}

Augmentation choose_augmentation(std::uint64_t seed, const AugmentOptions& options) {
  if (options.max_shift < 0) {
    throw InvalidArgument(fmt::format("max_shift {} is negative; give 0 (no shift) or more, e.g. 4",
                                      options.max_shift));
  }
  // Always three draws in this order, so turning the flip off leaves the shifts as they were.
  pipeline::SplitMix64 random(seed);
  const bool heads = (random.next() >> 63U) != 0;
  const std::uint64_t choices = 2 * static_cast<std::uint64_t>(options.max_shift) + 1;
  const auto draw_shift = [&] {
    return static_cast<int>(static_cast<std::int64_t>(random.below(choices)) - options.max_shift);
  };
  Augmentation augmentation;
  augmentation.flipped = options.flip && heads;
  augmentation.dx = draw_shift();
  augmentation.dy = draw_shift();
  return augmentation;
}

Augmentation augment_sample(std::span<const std::uint8_t> src, std::span<std::uint8_t> dst, const ImageShape& shape,
                            std::uint64_t seed, const AugmentOptions& options) {
  const Augmentation augmentation = choose_augmentation(seed, options);
  shifted_crop(src, dst, shape, augmentation.dx, augmentation.dy);
  if (augmentation.flipped) flip_horizontal(dst, shape);
  return augmentation;
}

}  // namespace plimsoll
