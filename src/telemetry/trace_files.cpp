// read_trace: one entry point for every trace file format, told apart by the file's first bytes.
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>

#include <fmt/format.h>

#include "plimsoll/error.hpp"
#include "plimsoll/trace.hpp"
#include "telemetry/trace_binary.hpp"
#include "telemetry/trace_readers.hpp"

namespace plimsoll {
namespace {

std::string read_whole_file(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    const std::string reason = std::error_code(errno, std::generic_category()).message();
    throw InvalidArgument(fmt::format("{}: cannot open the trace: {}; check the path", path, reason));
  }
  constexpr std::size_t kChunk = std::size_t{1} << 20;
  std::string text;
  std::error_code size_error;
  const std::uintmax_t size_hint = std::filesystem::file_size(path, size_error);
  // One chunk of slack: the read loop asks for a whole chunk past the end before it sees end-of-file.
  if (!size_error) text.reserve(static_cast<std::size_t>(size_hint) + kChunk);

  // Chunked reads also serve pipes and /dev/stdin, whose size is unknown up front.
  std::size_t used = 0;
  while (true) {
    text.resize(used + kChunk);
    const std::size_t got = std::fread(text.data() + used, 1, kChunk, file);
    used += got;
    if (got < kChunk) break;
  }
  text.resize(used);
  const bool failed = std::ferror(file) != 0;
  const int read_errno = errno;
  std::fclose(file);
  if (failed) {
    const std::string reason = std::error_code(read_errno, std::generic_category()).message();
    throw InvalidArgument(fmt::format("{}: cannot read the trace: {}; pass a readable trace file", path, reason));
  }
  return text;
}

}  // namespace

Trace read_trace(const std::string& path) {
  const std::string bytes = read_whole_file(path);
  if (telemetry::binary::has_magic(bytes)) return telemetry::binary::parse_binary_trace(bytes, path);
  if (telemetry::has_rmm_csv_header(bytes)) return telemetry::parse_rmm_csv(bytes, path);
  return parse_trace(bytes, path);
}

}  // namespace plimsoll
