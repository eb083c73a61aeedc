// read_trace: one entry point for every trace file format, told apart by the file's first bytes.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include <fmt/format.h>

#include "plimsoll/error.hpp"
#include "plimsoll/trace.hpp"
#include "telemetry/traces/trace_binary.hpp"
#include "telemetry/traces/trace_readers.hpp"

namespace plimsoll {
namespace {

std::string errno_text(int error) { return std::error_code(error, std::generic_category()).message(); }

// A trace file's bytes. A regular file is mapped, not copied: a 10-million-event trace is hundreds of MiB, and
// copying it into a zero-filled string costs as much as parsing it. Pipes and /dev/stdin are read in chunks.
class FileBytes {
 public:
  explicit FileBytes(const std::string& path) : path_(path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw InvalidArgument(fmt::format("{}: cannot open the trace: {}; check the path", path, errno_text(errno)));
    struct stat info {};
    if (::fstat(fd, &info) == 0 && S_ISREG(info.st_mode) && info.st_size > 0) {
      const auto size = static_cast<std::size_t>(info.st_size);
      // MAP_POPULATE: the parsers read every byte in order, so fault the pages in up front.
      void* mapped = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
      if (mapped != MAP_FAILED) {
        ::close(fd);
        mapped_ = mapped;
        bytes_ = std::string_view(static_cast<const char*>(mapped), size);
        return;
      }
    }
    read_chunks(fd);
    ::close(fd);
    bytes_ = copy_;
  }
  ~FileBytes() {
    if (mapped_ != nullptr) ::munmap(mapped_, bytes_.size());
  }
  FileBytes(const FileBytes&) = delete;
  FileBytes& operator=(const FileBytes&) = delete;

  std::string_view bytes() const { return bytes_; }

 private:
  void read_chunks(int fd) {
    constexpr std::size_t kChunk = std::size_t{1} << 20;
    std::size_t used = 0;
    while (true) {
      copy_.resize(used + kChunk);
      const ssize_t got = ::read(fd, copy_.data() + used, kChunk);
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) {
        const int error = errno;
        ::close(fd);
        throw InvalidArgument(fmt::format("{}: cannot read the trace: {}; pass a readable trace file", path_,
                                          errno_text(error)));
      }
      used += static_cast<std::size_t>(got);
      if (got == 0) break;
    }
    copy_.resize(used);
  }

  std::string path_;
  void* mapped_ = nullptr;
  std::string copy_;
  std::string_view bytes_;
};

}  // namespace

Trace read_trace(const std::string& path) {
  const FileBytes file(path);
  const std::string_view bytes = file.bytes();
  Trace trace = telemetry::binary::has_magic(bytes)        ? telemetry::binary::parse_binary_trace(bytes, path)
                : telemetry::has_rmm_csv_header(bytes) ? telemetry::parse_rmm_csv(bytes, path)
                                                       : parse_trace(bytes, path);
  fill_missing_steps(trace);
  return trace;
}

}  // namespace plimsoll
