#pragma once
// The engine's critical sections are a few dozen nanoseconds: spinning briefly beats parking the thread
// in the kernel, and yielding after a while keeps an oversubscribed machine (CI's 2 cores) moving.
#include <atomic>
#include <thread>

#include "util/thread_annotations.hpp"

namespace plimsoll::util {

class PLIMSOLL_CAPABILITY("spin lock") SpinLock {
 public:
  // The uncontended exchange inline; the spin loop out of line, so callers (every device operation that takes
  // the lock) do not pay a call and its saved registers for the common case.
  // always_inline: GCC kept it out of line in the device's free (a call for one exchange on every heap free).
  [[gnu::always_inline]] void lock() noexcept PLIMSOLL_ACQUIRE() {
    if (!locked_.exchange(true, std::memory_order_acquire)) [[likely]] return;
    wait_and_lock();
  }
  void unlock() noexcept PLIMSOLL_RELEASE() { locked_.store(false, std::memory_order_release); }

 private:
  [[gnu::noinline]] void wait_and_lock() noexcept {
    for (int spins = 0;; ++spins) {
      while (locked_.load(std::memory_order_relaxed)) {
        if (++spins > 64) {
          std::this_thread::yield();
        } else {
#if defined(__x86_64__) || defined(__i386__)
          __builtin_ia32_pause();
#endif
        }
      }
      if (!locked_.exchange(true, std::memory_order_acquire)) return;
    }
  }

  std::atomic<bool> locked_{false};
};

/// std::lock_guard for a SpinLock, visible to Clang's analysis (libstdc++'s guards carry no annotations).
class PLIMSOLL_SCOPED_CAPABILITY SpinGuard {
 public:
  explicit SpinGuard(SpinLock& lock) noexcept PLIMSOLL_ACQUIRE(lock) : lock_(lock) { lock_.lock(); }
  ~SpinGuard() PLIMSOLL_RELEASE() { lock_.unlock(); }
  SpinGuard(const SpinGuard&) = delete;
  SpinGuard& operator=(const SpinGuard&) = delete;

 private:
  SpinLock& lock_;
};

}  // namespace plimsoll::util
