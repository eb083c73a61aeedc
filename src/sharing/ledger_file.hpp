#pragma once
// One GPU's ledger file, mapped: created atomically (built under a temporary name, then linked into place, so no
// process ever maps a half-initialized ledger), and checked on every open. A file that fails a check is reported
// with what is wrong and what to do; it is never used.
#include <cstdint>
#include <string>
#include <string_view>

#include "sharing/ledger_layout.hpp"

namespace plimsoll::sharing {

/// "<dir>/plimsoll-ledger-<uuid>".
std::string ledger_path(std::string_view dir, std::string_view gpu_uuid);
inline constexpr std::string_view kLedgerPrefix = "plimsoll-ledger-";

/// Why `bytes` (a whole ledger file) cannot be used as the ledger of `expected_uuid` (empty: any GPU), or an empty
/// string when it can. Checks size, magic, version, layout sizes, header checksum, and the entries' numbers.
std::string ledger_problem(const void* bytes, std::uint64_t size, std::string_view expected_uuid);

class LedgerFile {
 public:
  /// Opens the GPU's ledger for writing, creating it (limit = `device_bytes`) when absent. Throws plimsoll::Error
  /// naming the file, the problem and the fix when it is corrupt, of another version, or cannot be written.
  static LedgerFile open_or_create(std::string_view dir, std::string_view gpu_uuid, std::uint64_t device_bytes);
  /// Opens an existing ledger for writing, never creating it (a removed file stays removed). Throws plimsoll::Error
  /// as above, or when it is gone.
  static LedgerFile open_existing(const std::string& path);
  /// Maps an existing ledger read-only (for `plimsoll top`). Throws plimsoll::Error as above.
  static LedgerFile open_read_only(const std::string& path);

  LedgerFile(LedgerFile&& other) noexcept;
  LedgerFile& operator=(LedgerFile&&) = delete;
  LedgerFile(const LedgerFile&) = delete;
  ~LedgerFile();

  LedgerFileLayout& layout() const noexcept { return *layout_; }

  // Liveness across pid namespaces: a process in another pid namespace (a container) cannot be judged by its pid, so
  // each member holds an open-file-description lock (F_OFD_SETLK) on one byte per slot, far past the file's end,
  // for as long as it has the file open; the kernel drops it when the process dies, in any namespace. A forked
  // child that did not exec keeps the parent's lock (it shares the open file).

  /// Takes the lock for `slot` (false when the kernel refuses, e.g. a file system without OFD locks).
  bool hold_liveness_lock(int slot) const noexcept;
  void drop_liveness_lock(int slot) const noexcept;
  /// Whether another open file holds the lock for `slot` (never this object's own).
  bool liveness_lock_held(int slot) const noexcept;
  const std::string& path() const noexcept { return path_; }
  bool writable() const noexcept { return writable_; }

 private:
  LedgerFile(std::string path, LedgerFileLayout* layout, bool writable, int fd)
      : path_(std::move(path)), layout_(layout), writable_(writable), fd_(fd) {}
  std::string path_;
  LedgerFileLayout* layout_ = nullptr;
  bool writable_ = false;
  int fd_ = -1;  // kept open for the liveness locks
};

}  // namespace plimsoll::sharing
