#pragma once
// Image datasets in the IDX format of MNIST and Fashion-MNIST, held in memory, and the usual augmentations of one
// image: flip, shift with zero fill ("pad by 4, random crop" without the padded copy), normalize
// (docs/pipeline.md). Images are row-major bytes, rows x cols x channels (HWC).
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <vector>

namespace plimsoll {

/// The contents of an IDX file of unsigned bytes (type code 0x08, the type of every MNIST-style file).
struct IdxArray {
  std::vector<std::uint32_t> dims;  ///< 1 to 4 sizes, outermost first, each at least 1
  std::vector<std::uint8_t> data;   ///< the product of dims bytes, row-major
};

/// Reads an IDX file, gzip-compressed or not: told apart by the gzip magic bytes, not by the name. Throws
/// InvalidArgument naming the file, the problem and the fix for a missing file, a bad magic number, a type other
/// than unsigned byte, 0 or more than 4 dimensions, a dimension of 0, a header cut short, a payload shorter or
/// longer than the dimensions say, or a damaged gzip stream.
IdxArray read_idx(const std::filesystem::path& path);

/// The layout of one image: rows x cols x channels bytes, row-major, channels interleaved.
struct ImageShape {
  std::uint32_t rows = 0;
  std::uint32_t cols = 0;
  std::uint32_t channels = 1;

  /// rows x cols x channels. Throws InvalidArgument if it does not fit in 64 bits.
  std::size_t bytes() const;
};

/// Labelled images in memory: image i is bytes [i x shape().bytes(), (i + 1) x shape().bytes()) of one array.
class ImageDataset {
 public:
  /// Throws InvalidArgument for a shape with a 0 or pixels that are not labels.size() images of `shape`.
  ImageDataset(ImageShape shape, std::vector<std::uint8_t> pixels, std::vector<std::uint8_t> labels);

  std::size_t size() const noexcept { return labels_.size(); }
  const ImageShape& shape() const noexcept { return shape_; }
  std::uint32_t rows() const noexcept { return shape_.rows; }
  std::uint32_t cols() const noexcept { return shape_.cols; }
  /// Image i's shape().bytes() bytes. Throws InvalidArgument when i >= size().
  std::span<const std::uint8_t> image(std::size_t i) const;
  /// Image i's label. Throws InvalidArgument when i >= size().
  std::uint8_t label(std::size_t i) const;
  std::span<const std::uint8_t> labels() const noexcept { return labels_; }

 private:
  ImageShape shape_;
  std::vector<std::uint8_t> pixels_;
  std::vector<std::uint8_t> labels_;
};

/// Images from an IDX file of count x rows x cols (one channel) or count x rows x cols x channels, labels from a
/// 1-dimensional IDX file of the same count. Throws InvalidArgument (from read_idx, or for other dimensions or
/// counts that differ).
ImageDataset load_idx_dataset(const std::filesystem::path& images, const std::filesystem::path& labels);

enum class Split { train, test };

/// Where the Debian package dataset-fashion-mnist puts the files: /usr/share/datasets/fashion-mnist.
std::filesystem::path default_fashion_mnist_dir();

/// Fashion-MNIST (or MNIST: same names and layout) from `dir`: train-images-idx3-ubyte.gz and
/// train-labels-idx1-ubyte.gz, or t10k-... for the test split; each file may also be there without ".gz". 60000
/// train or 10000 test images of 28 x 28, labels 0 to 9. Throws InvalidArgument when the files are missing (saying
/// how to install them), damaged, disagree in count, or hold a label above 9.
ImageDataset load_fashion_mnist(const std::filesystem::path& dir, Split split);

/// Mirrors `image` left to right, in place. Throws InvalidArgument if image.size() != shape.bytes().
void flip_horizontal(std::span<std::uint8_t> image, const ImageShape& shape);

/// Writes `src` moved `dx` pixels right and `dy` down into `dst`, with 0 where nothing moved in: a crop at
/// (pad - dx, pad - dy) of `src` padded by `pad` zeros, without the padded copy. A shift of the whole width or
/// height or more gives all zeros. Throws InvalidArgument for sizes other than shape.bytes() or overlapping spans.
void shifted_crop(std::span<const std::uint8_t> src, std::span<std::uint8_t> dst, const ImageShape& shape, int dx,
                  int dy);

/// dst[i] = (src[i] / 255 - mean) / stddev, in float. Throws InvalidArgument for sizes that differ, a stddev that
/// is not above 0, or a mean or stddev that is not finite.
void normalize(std::span<const std::uint8_t> src, std::span<float> dst, float mean, float stddev);

/// The random part of augment_sample.
struct AugmentOptions {
  bool flip = true;   ///< flip horizontally with probability 1/2
  int max_shift = 4;  ///< shift by dx, dy drawn uniformly from [-max_shift, max_shift]; 0: no shift
};

/// What augment_sample did to a sample.
struct Augmentation {
  bool flipped = false;
  int dx = 0;
  int dy = 0;
  bool operator==(const Augmentation&) const = default;
};

/// The flip and shift for `seed`: a function of (seed, options) alone, computed with fixed-width integer arithmetic
/// (splitmix64), so the same seed gives the same augmentation on every platform, compiler and standard library.
/// Nearby seeds (a base plus the sample index) give unrelated draws. Throws InvalidArgument for max_shift < 0.
Augmentation choose_augmentation(std::uint64_t seed, const AugmentOptions& options = {});

/// dst = src shifted by (dx, dy), then flipped if chosen, as choose_augmentation(seed, options) says; returns that
/// choice. Throws as shifted_crop and choose_augmentation do.
Augmentation augment_sample(std::span<const std::uint8_t> src, std::span<std::uint8_t> dst, const ImageShape& shape,
                            std::uint64_t seed, const AugmentOptions& options = {});

}  // namespace plimsoll
