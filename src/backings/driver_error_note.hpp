#pragma once
// The last error a CUDA backing met where it cannot throw (a refused map is reported as out of memory, a failed
// event falls back to waiting for the whole device): kept for the backing's last_driver_error(), and the first one
// said on stderr. Its lock is a leaf that readers take without the backing's lock, so fork() takes it too, from
// the owning backing's Backing::do_lock_own_for_fork.
#include <cstdio>
#include <mutex>
#include <string>

namespace plimsoll::backings {

class DriverErrorNote {
 public:
  /// `label` starts the stderr line after "plimsoll: " (may be empty); `consequence` ends it, in parentheses.
  DriverErrorNote(const char* label, const char* consequence) : label_(label), consequence_(consequence) {}

  /// Keeps `message` (moved in: nothing allocates here); the first one is also said on stderr.
  void keep(std::string message) noexcept {
    const std::lock_guard lock(mutex_);
    const bool first = last_.empty();
    last_ = std::move(message);
    if (first) std::fprintf(stderr, "plimsoll: %s%s (%s)\n", label_, last_.c_str(), consequence_);
  }
  std::string last() const {
    const std::lock_guard lock(mutex_);
    return last_;
  }

  void lock_for_fork() const noexcept { mutex_.lock(); }  // NOLINT: released by unlock_after_fork
  void unlock_after_fork() const noexcept { mutex_.unlock(); }

 private:
  const char* label_;
  const char* consequence_;
  mutable std::mutex mutex_;
  std::string last_;  // guarded by mutex_
};

}  // namespace plimsoll::backings
