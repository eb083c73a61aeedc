#include "sharing/ledger_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

#include <fmt/format.h>

#include "plimsoll/error.hpp"

namespace plimsoll::sharing {

std::uint64_t header_checksum(const LedgerHeader& header) noexcept {
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  const auto* bytes = reinterpret_cast<const unsigned char*>(&header);
  for (std::size_t i = 0; i < offsetof(LedgerHeader, checksum); ++i) {
    hash ^= bytes[i];
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

std::string ledger_path(std::string_view dir, std::string_view gpu_uuid) {
  return fmt::format("{}/{}{}", dir, kLedgerPrefix, gpu_uuid);
}

std::string ledger_problem(const void* bytes, std::uint64_t size, std::string_view expected_uuid) {
  if (size < sizeof(LedgerHeader))
    return fmt::format("it is {} bytes, shorter than a ledger header ({} bytes)", size, sizeof(LedgerHeader));
  LedgerHeader header;  // a copy of the fixed part: the checks read nothing twice
  std::memcpy(static_cast<void*>(&header), bytes, offsetof(LedgerHeader, mutex));
  if (std::memcmp(header.magic, kLedgerMagic, sizeof kLedgerMagic) != 0) return "it does not start with a ledger's magic";
  if (header.version != kLedgerVersion)
    return fmt::format("it has ledger format version {}, and this plimsoll reads version {} (a job started by "
                       "another plimsoll version uses it)", header.version, kLedgerVersion);
  if (header_checksum(header) != header.checksum) return "its header checksum does not match (the header is damaged)";
  if (header.header_bytes != sizeof(LedgerHeader) || header.entry_bytes != sizeof(LedgerEntry) ||
      header.entry_count != kLedgerEntries)
    return fmt::format("its layout ({} header bytes, {} entries of {} bytes) is not this plimsoll's ({}, {} of {})",
                       header.header_bytes, header.entry_count, header.entry_bytes, sizeof(LedgerHeader),
                       kLedgerEntries, sizeof(LedgerEntry));
  if (size != sizeof(LedgerFileLayout))
    return fmt::format("it is {} bytes where a ledger is {}", size, sizeof(LedgerFileLayout));
  const std::string_view uuid(header.uuid, strnlen(header.uuid, kUuidChars));
  if (uuid.empty() || uuid.size() == kUuidChars) return "its GPU UUID is empty or not terminated";
  if (!expected_uuid.empty() && uuid != expected_uuid)
    return fmt::format("it is the ledger of GPU {}, not {}", uuid, expected_uuid);
  if (header.device_bytes == 0 || header.limit_bytes == 0 || header.limit_bytes > header.device_bytes)
    return fmt::format("its limit ({} bytes) is zero or above the GPU's memory ({} bytes)", header.limit_bytes,
                       header.device_bytes);
  const auto& layout = *static_cast<const LedgerFileLayout*>(bytes);
  for (std::uint32_t i = 0; i < kLedgerEntries; ++i) {
    const LedgerEntry& entry = layout.entries[i];
    if (entry.pid.load() == 0) continue;
    if (entry.pid.load() < 0 || entry.share.load() > entry.cap.load() || entry.cap.load() > header.limit_bytes ||
        entry.charged.load() > header.limit_bytes || entry.context.load() > entry.charged.load())
      return fmt::format("entry {} (pid {}) holds impossible numbers (share {}, cap {}, charged {}, limit {})", i,
                         entry.pid.load(), entry.share.load(), entry.cap.load(), entry.charged.load(),
                         header.limit_bytes);
  }
  return {};
}

namespace {

[[noreturn]] void refuse(const std::string& path, const std::string& problem) {
  throw Error(fmt::format("the GPU ledger {} cannot be used: {}. It is not trusted; stop the jobs sharing this GPU "
                          "and remove the file (it is created afresh by the next job), or point PLIMSOLL_LEDGER_DIR "
                          "at another directory", path, problem));
}

LedgerFileLayout* map_checked(int fd, const std::string& path, std::string_view uuid, bool writable) {
  struct stat info {};
  if (::fstat(fd, &info) != 0) refuse(path, fmt::format("fstat failed: {}", std::strerror(errno)));
  const auto size = static_cast<std::uint64_t>(info.st_size);
  if (size == 0 || size > (std::uint64_t{1} << 30)) refuse(path, fmt::format("it is {} bytes", size));
  void* mapped = ::mmap(nullptr, size, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
  if (mapped == MAP_FAILED) refuse(path, fmt::format("mmap failed: {}", std::strerror(errno)));
  const std::string problem = ledger_problem(mapped, size, uuid);
  if (!problem.empty()) {
    ::munmap(mapped, size);
    refuse(path, problem);
  }
  return static_cast<LedgerFileLayout*>(mapped);
}

// Builds a complete ledger under a private name and links it into place; false when another process won the race
// (the caller then opens theirs).
bool create(const std::string& path, std::string_view uuid, std::uint64_t device_bytes) {
  const std::string temporary = fmt::format("{}.{}.tmp", path, ::getpid());
  const int fd = ::open(temporary.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0)
    throw Error(fmt::format("cannot create the GPU ledger {} ({}): make the directory writable, or point "
                            "PLIMSOLL_LEDGER_DIR at one that is", path, std::strerror(errno)));
  // Every job sharing the GPU must be able to write it, whoever started first (the umask would narrow it).
  ::fchmod(fd, 0666);
  bool linked = false;
  if (::ftruncate(fd, sizeof(LedgerFileLayout)) == 0) {
    void* mapped = ::mmap(nullptr, sizeof(LedgerFileLayout), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (mapped != MAP_FAILED) {
      auto* layout = new (mapped) LedgerFileLayout;  // zero-filled by ftruncate: atomics at 0, free slots
      LedgerHeader& header = layout->header;
      std::memcpy(header.magic, kLedgerMagic, sizeof kLedgerMagic);
      header.version = kLedgerVersion;
      header.header_bytes = sizeof(LedgerHeader);
      header.entry_bytes = sizeof(LedgerEntry);
      header.entry_count = kLedgerEntries;
      std::memset(header.uuid, 0, kUuidChars);
      std::memcpy(header.uuid, uuid.data(), uuid.size());
      header.device_bytes = device_bytes;
      header.limit_bytes = device_bytes;
      header.checksum = header_checksum(header);
      pthread_mutexattr_t attributes;
      pthread_mutexattr_init(&attributes);
      pthread_mutexattr_setpshared(&attributes, PTHREAD_PROCESS_SHARED);
      pthread_mutexattr_setrobust(&attributes, PTHREAD_MUTEX_ROBUST);
      pthread_mutex_init(&header.mutex, &attributes);
      pthread_mutexattr_destroy(&attributes);
      ::msync(mapped, sizeof(LedgerFileLayout), MS_SYNC);
      ::munmap(mapped, sizeof(LedgerFileLayout));
      linked = ::link(temporary.c_str(), path.c_str()) == 0;
    }
  }
  const int link_error = errno;
  ::close(fd);
  ::unlink(temporary.c_str());
  if (!linked && link_error != EEXIST)
    throw Error(fmt::format("cannot create the GPU ledger {} ({}): make the directory writable, or point "
                            "PLIMSOLL_LEDGER_DIR at one that is", path, std::strerror(link_error)));
  return linked;
}

}  // namespace

LedgerFile LedgerFile::open_or_create(std::string_view dir, std::string_view gpu_uuid, std::uint64_t device_bytes) {
  if (gpu_uuid.empty() || gpu_uuid.size() >= kUuidChars || gpu_uuid.find('/') != std::string_view::npos)
    throw InvalidArgument(fmt::format("'{}' is not a GPU UUID a ledger can be named by", gpu_uuid));
  std::string path = ledger_path(dir, gpu_uuid);
  for (int attempt = 0; attempt < 2; ++attempt) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd >= 0) {
      LedgerFileLayout* layout = nullptr;
      try {
        layout = map_checked(fd, path, gpu_uuid, true);
      } catch (...) {
        ::close(fd);
        throw;
      }
      return LedgerFile(std::move(path), layout, true, fd);
    }
    if (errno == EACCES || errno == EROFS || errno == EPERM)
      throw Error(fmt::format("cannot open the GPU ledger {} for writing ({}): run the job as a user who may write "
                              "it, or point PLIMSOLL_LEDGER_DIR at a directory you can write (every job sharing "
                              "the GPU must use the same one)", path, std::strerror(errno)));
    if (errno != ENOENT)
      throw Error(fmt::format("cannot open the GPU ledger {} ({})", path, std::strerror(errno)));
    create(path, gpu_uuid, device_bytes);  // we or a racing process made it: open it on the next turn
  }
  throw Error(fmt::format("the GPU ledger {} disappeared while it was being created; start the job again", path));
}

LedgerFile LedgerFile::open_existing(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) throw Error(fmt::format("cannot open the GPU ledger {} for writing ({})", path, std::strerror(errno)));
  LedgerFileLayout* layout = nullptr;
  try {
    layout = map_checked(fd, path, {}, true);
  } catch (...) {
    ::close(fd);
    throw;
  }
  return LedgerFile(path, layout, true, fd);
}

LedgerFile LedgerFile::open_read_only(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(fmt::format("cannot read the GPU ledger {} ({})", path, std::strerror(errno)));
  LedgerFileLayout* layout = nullptr;
  try {
    layout = map_checked(fd, path, {}, false);
  } catch (...) {
    ::close(fd);
    throw;
  }
  return LedgerFile(path, layout, false, fd);
}

LedgerFile::LedgerFile(LedgerFile&& other) noexcept
    : path_(std::move(other.path_)), layout_(other.layout_), writable_(other.writable_), fd_(other.fd_) {
  other.layout_ = nullptr;
  other.fd_ = -1;
}

LedgerFile::~LedgerFile() {
  if (layout_ != nullptr) ::munmap(layout_, sizeof(LedgerFileLayout));
  if (fd_ >= 0) ::close(fd_);  // drops this file's liveness locks
}

namespace {
// One byte per slot, far past the file's end (locks past the end are allowed and touch no data).
struct flock liveness_range(int slot, short type) {
  struct flock range {};
  range.l_type = type;
  range.l_whence = SEEK_SET;
  range.l_start = static_cast<off_t>((std::uint64_t{1} << 30) + static_cast<std::uint64_t>(slot));
  range.l_len = 1;
  return range;
}
}  // namespace

bool LedgerFile::hold_liveness_lock(int slot) const noexcept {
  struct flock range = liveness_range(slot, F_RDLCK);  // a read lock: the read-only `top` may test it
  return fd_ >= 0 && ::fcntl(fd_, F_OFD_SETLK, &range) == 0;
}

void LedgerFile::drop_liveness_lock(int slot) const noexcept {
  struct flock range = liveness_range(slot, F_UNLCK);
  if (fd_ >= 0) ::fcntl(fd_, F_OFD_SETLK, &range);
}

bool LedgerFile::liveness_lock_held(int slot) const noexcept {
  struct flock range = liveness_range(slot, F_WRLCK);  // conflicts with any other file's read lock
  if (fd_ < 0 || ::fcntl(fd_, F_OFD_GETLK, &range) != 0) return true;  // cannot tell: alive
  return range.l_type != F_UNLCK;
}

}  // namespace plimsoll::sharing
