// IDX files read raw and gzipped, each kind of damage reported with the file and the problem, images paired with
// labels, and the real Fashion-MNIST when its Debian package is installed.
#include <zlib.h>

#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "plimsoll/datasets.hpp"
#include "plimsoll/error.hpp"

namespace plimsoll {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using Bytes = std::vector<std::uint8_t>;

// An IDX file's bytes: magic, big-endian sizes, data.
Bytes idx_bytes(std::uint8_t type, const std::vector<std::uint32_t>& dims, const Bytes& data) {
  Bytes bytes{0, 0, type, static_cast<std::uint8_t>(dims.size())};
  for (std::uint32_t dim : dims) {
    for (unsigned shift : {24U, 16U, 8U, 0U}) bytes.push_back(static_cast<std::uint8_t>(dim >> shift));
  }
  bytes.insert(bytes.end(), data.begin(), data.end());
  return bytes;
}

Bytes counting(std::size_t size) {
  Bytes data(size);
  for (std::size_t i = 0; i < size; ++i) data[i] = static_cast<std::uint8_t>(i * 7 + i / 256);
  return data;
}

// Each test writes into its own folder: ctest may run them side by side.
class IdxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           ("plimsoll-idx-" + std::to_string(::getpid()) + "-" + test->test_suite_name() + "-" + test->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::filesystem::path write_raw(const std::string& name, const Bytes& bytes) const {
    const std::filesystem::path path = dir_ / name;
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                                static_cast<std::streamsize>(bytes.size()));
    return path;
  }

  std::filesystem::path write_gzip(const std::string& name, const Bytes& bytes) const {
    const std::filesystem::path path = dir_ / name;
    gzFile file = gzopen(path.c_str(), "wb");
    EXPECT_NE(file, nullptr);
    EXPECT_EQ(gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
    EXPECT_EQ(gzclose(file), Z_OK);
    return path;
  }

  Bytes contents(const std::filesystem::path& path) const {
    std::ifstream in(path, std::ios::binary);
    return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }

  std::filesystem::path dir_;
};

std::string rejection_of(const std::filesystem::path& path) {
  try {
    const IdxArray array = read_idx(path);
    ADD_FAILURE() << path << " was accepted with " << array.data.size() << " bytes";
  } catch (const InvalidArgument& error) {
    return error.what();
  }
  return {};
}

TEST_F(IdxTest, RawAndGzippedFilesRoundTrip) {
  const Bytes data = counting(3 * 4 * 5);
  const Bytes file = idx_bytes(0x08, {3, 4, 5}, data);
  // The names say the opposite of the contents: the reader goes by the gzip magic bytes.
  for (const auto& path : {write_raw("raw.gz", file), write_gzip("compressed.idx", file)}) {
    const IdxArray array = read_idx(path);
    EXPECT_THAT(array.dims, ElementsAre(3u, 4u, 5u)) << path;
    EXPECT_EQ(array.data, data) << path;
  }
}

TEST_F(IdxTest, OneToFourDimensionsAndLargeSizes) {
  EXPECT_THAT(read_idx(write_raw("labels", idx_bytes(0x08, {7}, counting(7)))).dims, ElementsAre(7u));
  EXPECT_THAT(read_idx(write_gzip("rgb.gz", idx_bytes(0x08, {2, 3, 4, 3}, counting(72)))).dims,
              ElementsAre(2u, 3u, 4u, 3u));
  // Sizes above 2^24 (all four header bytes used), and a payload read in several chunks.
  const Bytes big = counting(std::size_t{1} << 25U);
  const IdxArray array = read_idx(write_gzip("big.gz", idx_bytes(0x08, {1U << 25U}, big)));
  EXPECT_THAT(array.dims, ElementsAre(1u << 25U));
  EXPECT_EQ(array.data, big);
}

TEST_F(IdxTest, BadMagicIsRejected) {
  Bytes file = idx_bytes(0x08, {2}, {1, 2});
  file[0] = 0x50;
  const auto path = write_raw("bad-magic", file);
  EXPECT_THAT(rejection_of(path), AllOf(HasSubstr(path.string()), HasSubstr("does not start with the IDX magic"),
                                        HasSubstr("50 00 08 01"), HasSubstr("download or write it again")));
}

TEST_F(IdxTest, UnknownAndUnsupportedTypesAreRejected) {
  const auto unknown = write_raw("type-07", idx_bytes(0x07, {2}, {1, 2}));
  EXPECT_THAT(rejection_of(unknown), AllOf(HasSubstr(unknown.string()), HasSubstr("type code 0x07"),
                                           HasSubstr("not an IDX type")));
  const auto floats = write_raw("type-0d", idx_bytes(0x0D, {1}, {0, 0, 0, 0}));
  EXPECT_THAT(rejection_of(floats), AllOf(HasSubstr(floats.string()), HasSubstr("32-bit float elements (type 0x0D)"),
                                          HasSubstr("convert the file to unsigned bytes")));
}

TEST_F(IdxTest, DimensionCountAndZeroSizesAreRejected) {
  const auto none = write_raw("no-dims", idx_bytes(0x08, {}, {1}));
  EXPECT_THAT(rejection_of(none), AllOf(HasSubstr(none.string()), HasSubstr("has 0 dimensions")));
  const auto five = write_raw("five-dims", idx_bytes(0x08, {1, 1, 1, 1, 1}, {1}));
  EXPECT_THAT(rejection_of(five), AllOf(HasSubstr(five.string()), HasSubstr("has 5 dimensions")));
  const auto zero = write_raw("zero-size", idx_bytes(0x08, {4, 0, 2}, {}));
  EXPECT_THAT(rejection_of(zero),
              AllOf(HasSubstr(zero.string()), HasSubstr("a dimension of 0 (dimension 2 of 4x0x2)")));
  const std::uint32_t most = 0xFFFFFFFFU;
  const auto huge = write_raw("huge", idx_bytes(0x08, {most, most, most, most}, {}));
  EXPECT_THAT(rejection_of(huge), AllOf(HasSubstr(huge.string()), HasSubstr("2^64 bytes or more")));
}

TEST_F(IdxTest, TruncatedHeaderIsRejected) {
  const auto empty = write_raw("empty", {});
  EXPECT_THAT(rejection_of(empty), AllOf(HasSubstr(empty.string()), HasSubstr("ends after 0 bytes, inside its 4-byte "
                                                                              "magic number")));
  Bytes file = idx_bytes(0x08, {60000, 28, 28}, {});
  file.resize(9);
  const auto path = write_gzip("short-header.gz", file);
  EXPECT_THAT(rejection_of(path), AllOf(HasSubstr(path.string()), HasSubstr("ends inside its header: 3 dimensions make "
                                                                            "a 16-byte header")));
}

TEST_F(IdxTest, TruncatedPayloadIsRejected) {
  const Bytes file = idx_bytes(0x08, {10, 10}, counting(60));
  for (const auto& path : {write_raw("short", file), write_gzip("short.gz", file)}) {
    EXPECT_THAT(rejection_of(path),
                AllOf(HasSubstr(path.string()),
                      HasSubstr("cut short: expected 100 bytes of data (10x10) after the 12-byte header, found 60")));
  }
}

TEST_F(IdxTest, TrailingBytesAreRejected) {
  const Bytes file = idx_bytes(0x08, {10, 10}, counting(103));
  for (const auto& path : {write_raw("long", file), write_gzip("long.gz", file)}) {
    EXPECT_THAT(rejection_of(path), AllOf(HasSubstr(path.string()), HasSubstr("has 3 bytes more than its header says"),
                                          HasSubstr("expected 100 bytes of data (10x10) after the 12-byte header, "
                                                    "found 103")));
  }
}

TEST_F(IdxTest, DamagedGzipStreamsAreRejected) {
  const Bytes file = idx_bytes(0x08, {100, 100}, counting(10000));
  Bytes gzip = contents(write_gzip("good.gz", file));
  ASSERT_GT(gzip.size(), 40u);

  Bytes bad_checksum = gzip;
  bad_checksum[bad_checksum.size() - 8] ^= 0xFFU;  // the trailer's CRC-32 of the data
  const auto crc = write_raw("bad-crc.gz", bad_checksum);
  EXPECT_THAT(rejection_of(crc), AllOf(HasSubstr(crc.string()), HasSubstr("damaged gzip stream (zlib: incorrect data "
                                                                          "check)")));

  Bytes scrambled = gzip;
  for (std::size_t i = 12; i < scrambled.size() - 8; i += 3) scrambled[i] ^= 0x5AU;
  const auto garbled = write_raw("scrambled.gz", scrambled);
  EXPECT_THAT(rejection_of(garbled), AllOf(HasSubstr(garbled.string()), HasSubstr("damaged gzip stream")));

  gzip.resize(gzip.size() / 2);
  const auto cut = write_raw("cut.gz", gzip);
  EXPECT_THAT(rejection_of(cut), AllOf(HasSubstr(cut.string()), HasSubstr("ends before the end of its gzip stream")));
}

TEST_F(IdxTest, MissingFileAndFolderAreRejected) {
  const auto missing = dir_ / "no-such-file.gz";
  EXPECT_THAT(rejection_of(missing), AllOf(HasSubstr(missing.string()), HasSubstr("does not exist; check the path")));
  EXPECT_THAT(rejection_of(dir_), AllOf(HasSubstr(dir_.string()), HasSubstr("is a folder")));
}

TEST_F(IdxTest, DatasetPairsImagesWithLabels) {
  const auto images = write_gzip("images.gz", idx_bytes(0x08, {3, 2, 2}, counting(12)));
  const auto labels = write_raw("labels", idx_bytes(0x08, {3}, {4, 0, 9}));
  const ImageDataset dataset = load_idx_dataset(images, labels);
  ASSERT_EQ(dataset.size(), 3u);
  EXPECT_EQ(dataset.rows(), 2u);
  EXPECT_EQ(dataset.cols(), 2u);
  EXPECT_EQ(dataset.shape().channels, 1u);
  const Bytes all = counting(12);
  EXPECT_THAT(dataset.image(2), ElementsAreArray(all.begin() + 8, all.end()));
  EXPECT_EQ(dataset.label(0), 4);
  EXPECT_EQ(dataset.label(2), 9);
  EXPECT_THAT(dataset.labels(), ElementsAre(4, 0, 9));
  EXPECT_THROW(dataset.image(3), InvalidArgument);
  EXPECT_THROW(dataset.label(3), InvalidArgument);

  const auto rgb = write_raw("rgb", idx_bytes(0x08, {3, 2, 4, 3}, counting(72)));
  EXPECT_EQ(load_idx_dataset(rgb, labels).shape().channels, 3u);
}

TEST_F(IdxTest, DatasetRejectsMismatchedFiles) {
  const auto images = write_raw("images", idx_bytes(0x08, {3, 2, 2}, counting(12)));
  const auto two_labels = write_raw("two-labels", idx_bytes(0x08, {2}, {1, 2}));
  try {
    load_idx_dataset(images, two_labels);
    ADD_FAILURE() << "3 images with 2 labels were accepted";
  } catch (const InvalidArgument& error) {
    EXPECT_THAT(error.what(), AllOf(HasSubstr("holds 3 images but"), HasSubstr(two_labels.string()),
                                    HasSubstr("holds 2 labels")));
  }
  EXPECT_THROW(load_idx_dataset(two_labels, two_labels), InvalidArgument);  // labels given as images
  EXPECT_THROW(load_idx_dataset(images, images), InvalidArgument);          // images given as labels
  EXPECT_THROW(ImageDataset({2, 0, 1}, {}, {}), InvalidArgument);
  EXPECT_THROW(ImageDataset({2, 2, 1}, Bytes(7), Bytes(2)), InvalidArgument);
}

TEST_F(IdxTest, FashionMnistFilesAreFoundByTheirNames) {
  const Bytes pixels = counting(2 * 28 * 28);
  write_gzip("t10k-images-idx3-ubyte.gz", idx_bytes(0x08, {2, 28, 28}, pixels));
  write_raw("t10k-labels-idx1-ubyte", idx_bytes(0x08, {2}, {9, 0}));  // as it is once gunzipped
  const ImageDataset test = load_fashion_mnist(dir_, Split::test);
  EXPECT_EQ(test.size(), 2u);
  EXPECT_EQ(test.label(0), 9);

  try {
    load_fashion_mnist(dir_, Split::train);
    ADD_FAILURE() << "a folder without train files was accepted";
  } catch (const InvalidArgument& error) {
    EXPECT_THAT(error.what(), AllOf(HasSubstr(dir_.string()), HasSubstr("train-images-idx3-ubyte.gz"),
                                    HasSubstr("apt-get install dataset-fashion-mnist")));
  }
  write_raw("t10k-labels-idx1-ubyte", idx_bytes(0x08, {2}, {9, 10}));
  EXPECT_THROW(load_fashion_mnist(dir_, Split::test), InvalidArgument);  // label 10 of 0..9
  write_gzip("train-images-idx3-ubyte.gz", idx_bytes(0x08, {1, 27, 28}, counting(27 * 28)));
  write_gzip("train-labels-idx1-ubyte.gz", idx_bytes(0x08, {1}, {3}));
  EXPECT_THROW(load_fashion_mnist(dir_, Split::train), InvalidArgument);  // 27x28 images
}

// The real files, from the Debian package dataset-fashion-mnist.
TEST(FashionMnist, InstalledDatasetHasTheKnownShapeAndClasses) {
  const std::filesystem::path dir = default_fashion_mnist_dir();
  if (!std::filesystem::exists(dir / "train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "Fashion-MNIST is not installed in " << dir << ": apt-get install dataset-fashion-mnist";
  }
  const ImageDataset train = load_fashion_mnist(dir, Split::train);
  const ImageDataset test = load_fashion_mnist(dir, Split::test);
  EXPECT_EQ(train.size(), 60000u);
  EXPECT_EQ(test.size(), 10000u);
  for (const ImageDataset* split : {&train, &test}) {
    EXPECT_EQ(split->rows(), 28u);
    EXPECT_EQ(split->cols(), 28u);
    EXPECT_EQ(split->shape().channels, 1u);
    std::array<std::size_t, 10> per_class{};
    for (std::uint8_t label : split->labels()) {
      ASSERT_LT(label, 10);
      ++per_class[label];
    }
    for (std::size_t count : per_class) EXPECT_EQ(count, split->size() / 10);  // balanced: 6000 or 1000 each
  }
  // The mean and standard deviation that normalize's message quotes.
  double sum = 0;
  double squares = 0;
  for (std::size_t i = 0; i < train.size(); ++i) {
    for (std::uint8_t pixel : train.image(i)) {
      const double x = pixel / 255.0;
      sum += x;
      squares += x * x;
    }
  }
  const double n = 60000.0 * 28 * 28;
  EXPECT_NEAR(sum / n, 0.2860, 5e-5);
  EXPECT_NEAR(std::sqrt(squares / n - (sum / n) * (sum / n)), 0.3530, 5e-5);
}

}  // namespace
}  // namespace plimsoll
