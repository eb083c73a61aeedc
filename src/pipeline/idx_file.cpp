// IDX files, the format of MNIST and Fashion-MNIST: two zero bytes, a type code, the number of dimensions, that
// many big-endian uint32 sizes, then the elements. Read through zlib, which passes a file that does not begin with
// the gzip magic (1f 8b) through as it is: one path reads compressed and raw files, told apart by content.
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "plimsoll/datasets.hpp"
#include "plimsoll/error.hpp"
#include "util/checked_math.hpp"

namespace plimsoll {
namespace {

constexpr std::uint8_t kUnsignedByte = 0x08;
constexpr std::size_t kMaxDims = 4;
constexpr std::string_view kDamaged = "the file is damaged or not an IDX file; download or write it again";
constexpr std::string_view kRecompress = "download or compress it again";

std::string_view type_name(std::uint8_t code) {
  switch (code) {
    case 0x08: return "unsigned byte";
    case 0x09: return "signed byte";
    case 0x0B: return "16-bit integer";
    case 0x0C: return "32-bit integer";
    case 0x0D: return "32-bit float";
    case 0x0E: return "64-bit float";
    default: return {};
  }
}

struct GzClose {
  void operator()(gzFile file) const noexcept { gzclose(file); }
};

// An open IDX file: reads its decompressed bytes, and words every error with the file's name.
class IdxReader {
 public:
  explicit IdxReader(const std::filesystem::path& path) : path_(path) {
    std::error_code error;  // any other failure to look is gzopen's to report, with its errno
    const auto type = std::filesystem::status(path, error).type();
    if (type == std::filesystem::file_type::not_found) fail("does not exist", "check the path");
    if (type == std::filesystem::file_type::directory) fail("is a folder", "give the path of an IDX file in it");
    file_.reset(gzopen(path.c_str(), "rb"));
    if (!file_) {
      fail(fmt::format("cannot be opened: {}", std::generic_category().message(errno)), "check its permissions");
    }
    gzbuffer(file_.get(), 1U << 18U);  // fewer, larger reads than zlib's 8 KiB default
  }

  // Up to `size` bytes into `out`; fewer only at the end of the data.
  std::size_t read(std::uint8_t* out, std::size_t size) {
    std::size_t total = 0;
    while (total < size) {
      const auto want = static_cast<unsigned>(std::min<std::size_t>(size - total, 1U << 20U));
      const int got = gzread(file_.get(), out + total, want);
      // gzread reports a stream cut short as a short read, not -1: only gzerror tells it from the end of the file.
      int code = Z_OK;
      const std::string_view message = gzerror(file_.get(), &code);
      if (got < 0 || code != Z_OK) {
        if (code == Z_BUF_ERROR) fail("ends before the end of its gzip stream (cut short)", kRecompress);
        // zlib's message starts with the path, which ours already names.
        const std::string prefix = path_.string() + ": ";
        fail(fmt::format("has a damaged gzip stream (zlib: {})",
                         message.starts_with(prefix) ? message.substr(prefix.size()) : message),
             kRecompress);
      }
      total += static_cast<std::size_t>(got);
      if (static_cast<unsigned>(got) < want) break;
    }
    return total;
  }

  [[noreturn]] void fail(std::string_view problem, std::string_view fix) const {
    throw InvalidArgument(fmt::format("IDX file {} {}; {}", path_.string(), problem, fix));
  }

 private:
  std::filesystem::path path_;
  std::unique_ptr<gzFile_s, GzClose> file_;
};

std::uint32_t big_endian(const std::uint8_t* bytes) {
  return std::uint32_t{bytes[0]} << 24U | std::uint32_t{bytes[1]} << 16U | std::uint32_t{bytes[2]} << 8U | bytes[3];
}

// The header: the magic, then the dimensions, each checked.
std::vector<std::uint32_t> read_dims(IdxReader& reader) {
  std::array<std::uint8_t, 4> magic{};
  const std::size_t got = reader.read(magic.data(), magic.size());
  if (got < magic.size()) {
    reader.fail(fmt::format("ends after {} bytes, inside its 4-byte magic number", got), kDamaged);
  }
  if (magic[0] != 0 || magic[1] != 0) {
    reader.fail(fmt::format("does not start with the IDX magic (two zero bytes, the type, the number of dimensions): "
                            "it starts {:02x} {:02x} {:02x} {:02x}",
                            magic[0], magic[1], magic[2], magic[3]),
                kDamaged);
  }
  const std::uint8_t type = magic[2];
  if (type_name(type).empty()) {
    reader.fail(fmt::format("has type code 0x{:02X}, which is not an IDX type (0x08, 0x09, 0x0B to 0x0E)", type),
                kDamaged);
  }
  if (type != kUnsignedByte) {
    reader.fail(fmt::format("holds {} elements (type 0x{:02X}); plimsoll reads IDX files of unsigned bytes (0x08), "
                            "the type of MNIST-style images and labels",
                            type_name(type), type),
                "convert the file to unsigned bytes");
  }
  const std::size_t count = magic[3];
  if (count == 0 || count > kMaxDims) {
    reader.fail(fmt::format("has {} dimensions; MNIST-style files have 1 to {} (labels 1, images 3 or 4)", count,
                            kMaxDims),
                kDamaged);
  }

  std::array<std::uint8_t, 4 * kMaxDims> sizes{};
  const std::size_t size_bytes = 4 * count;
  if (reader.read(sizes.data(), size_bytes) < size_bytes) {
    reader.fail(fmt::format("ends inside its header: {} dimensions make a {}-byte header", count, 4 + size_bytes),
                kDamaged);
  }
  std::vector<std::uint32_t> dims;
  for (std::size_t i = 0; i < count; ++i) dims.push_back(big_endian(&sizes[4 * i]));
  for (std::size_t i = 0; i < count; ++i) {
    if (dims[i] == 0) {
      reader.fail(fmt::format("has a dimension of 0 (dimension {} of {}), so it holds nothing", i + 1,
                              fmt::join(dims, "x")),
                  kDamaged);
    }
  }
  return dims;
}

}  // namespace

IdxArray read_idx(const std::filesystem::path& path) {
  IdxReader reader(path);
  IdxArray array;
  array.dims = read_dims(reader);
  std::uint64_t expected = 1;
  for (std::uint32_t dim : array.dims) {
    const auto product = util::checked_multiply(expected, dim);
    if (!product) {
      reader.fail(fmt::format("has dimensions {}, 2^64 bytes or more", fmt::join(array.dims, "x")), kDamaged);
    }
    expected = *product;
  }
  const std::size_t header = 4 + 4 * array.dims.size();

  // Reserved up to 256 MiB (address space: pages are touched only as data arrives), then grown as data arrives: a
  // damaged header may claim terabytes.
  array.data.reserve(std::min<std::uint64_t>(expected, std::uint64_t{1} << 28U));
  constexpr std::size_t kChunk = std::size_t{1} << 22U;
  while (array.data.size() < expected) {
    const std::size_t before = array.data.size();
    const std::size_t want = std::min<std::size_t>(kChunk, expected - before);
    array.data.resize(before + want);
    const std::size_t got = reader.read(array.data.data() + before, want);
    array.data.resize(before + got);
    if (got < want) break;
  }
  if (array.data.size() < expected) {
    reader.fail(fmt::format("is cut short: expected {} bytes of data ({}) after the {}-byte header, found {}",
                            expected, fmt::join(array.dims, "x"), header, array.data.size()),
                "download or write it again");
  }

  std::array<std::uint8_t, 4096> rest{};
  std::uint64_t trailing = 0;
  while (const std::size_t got = reader.read(rest.data(), rest.size())) trailing += got;
  if (trailing > 0) {
    reader.fail(fmt::format("has {} bytes more than its header says: expected {} bytes of data ({}) after the "
                            "{}-byte header, found {}",
                            trailing, expected, fmt::join(array.dims, "x"), header, expected + trailing),
                "write the file again with a header that matches its data");
  }
  return array;
}

}  // namespace plimsoll
