#include "sharing/entry_liveness.hpp"

#include <sys/stat.h>

#include "sharing/process_identity.hpp"

namespace plimsoll::sharing {

std::uint64_t this_pid_namespace() noexcept {
  struct stat info {};
  if (::stat("/proc/self/ns/pid", &info) != 0) return 0;
  return static_cast<std::uint64_t>(info.st_ino);
}

bool entry_alive(const LedgerFile& file, int slot, std::uint64_t reader_namespace) {
  constexpr auto relaxed = std::memory_order_relaxed;
  const LedgerEntry& e = file.layout().entries[slot];
  const int pid = e.pid.load(relaxed);
  if (pid == 0) return false;
  const std::uint64_t entry_namespace = e.pid_namespace.load(relaxed);
  if (entry_namespace == 0 || reader_namespace == 0 || entry_namespace == reader_namespace)
    return is_running(ProcessIdentity{.pid = pid, .start_time = e.start_time.load(relaxed)});
  if ((e.flags.load(relaxed) & kEntryLivenessLock) != 0) return file.liveness_lock_held(slot);
  return true;
}

}  // namespace plimsoll::sharing
