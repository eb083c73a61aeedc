// Labelled images in one contiguous array, and their loading from a pair of IDX files (images, labels).
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "plimsoll/datasets.hpp"
#include "plimsoll/error.hpp"
#include "util/checked_math.hpp"

namespace plimsoll {

std::size_t ImageShape::bytes() const {
  auto product = util::checked_multiply(rows, cols);
  if (product) product = util::checked_multiply(*product, channels);
  if (!product) {
    throw InvalidArgument(fmt::format("image shape {}x{}x{} is 2^64 bytes or more; check the shape", rows, cols,
                                      channels));
  }
  return *product;
}

ImageDataset::ImageDataset(ImageShape shape, std::vector<std::uint8_t> pixels, std::vector<std::uint8_t> labels)
    : shape_(shape), pixels_(std::move(pixels)), labels_(std::move(labels)) {
  if (shape_.rows == 0 || shape_.cols == 0 || shape_.channels == 0) {
    throw InvalidArgument(fmt::format("image shape {}x{}x{} has a 0; rows, cols and channels must be at least 1",
                                      shape_.rows, shape_.cols, shape_.channels));
  }
  const auto expected = util::checked_multiply(labels_.size(), shape_.bytes());
  if (!expected || *expected != pixels_.size()) {
    throw InvalidArgument(fmt::format("{} bytes of pixels are not {} images of {}x{}x{} ({} bytes each); give one "
                                      "label per image",
                                      pixels_.size(), labels_.size(), shape_.rows, shape_.cols, shape_.channels,
                                      shape_.bytes()));
  }
}

std::span<const std::uint8_t> ImageDataset::image(std::size_t i) const {
  if (i >= size()) {
    throw InvalidArgument(fmt::format("image {} is out of range: the dataset has {} images", i, size()));
  }
  const std::size_t bytes = shape_.bytes();
  return std::span<const std::uint8_t>(pixels_).subspan(i * bytes, bytes);
}

std::uint8_t ImageDataset::label(std::size_t i) const {
  if (i >= size()) {
    throw InvalidArgument(fmt::format("label {} is out of range: the dataset has {} labels", i, size()));
  }
  return labels_[i];
}

ImageDataset load_idx_dataset(const std::filesystem::path& images, const std::filesystem::path& labels) {
  IdxArray pixels = read_idx(images);
  if (pixels.dims.size() != 3 && pixels.dims.size() != 4) {
    throw InvalidArgument(fmt::format("IDX file {} has dimensions {}, not those of images (count x rows x cols, or "
                                      "count x rows x cols x channels); give the images file",
                                      images.string(), fmt::join(pixels.dims, "x")));
  }
  IdxArray classes = read_idx(labels);
  if (classes.dims.size() != 1) {
    throw InvalidArgument(fmt::format("IDX file {} has dimensions {}, not those of labels (one dimension: the "
                                      "count); give the labels file",
                                      labels.string(), fmt::join(classes.dims, "x")));
  }
  if (pixels.dims[0] != classes.dims[0]) {
    throw InvalidArgument(fmt::format("IDX file {} holds {} images but {} holds {} labels; give the images and "
                                      "labels of the same split",
                                      images.string(), pixels.dims[0], labels.string(), classes.dims[0]));
  }
  const ImageShape shape{pixels.dims[1], pixels.dims[2], pixels.dims.size() == 4 ? pixels.dims[3] : 1};
  return ImageDataset(shape, std::move(pixels.data), std::move(classes.data));
}

}  // namespace plimsoll
