#pragma once
// The engine's critical sections are a few dozen nanoseconds: spinning briefly beats parking the thread
// in the kernel, and yielding after a while keeps an oversubscribed machine (CI's 2 cores) moving.
#include <atomic>
#include <thread>

namespace plimsoll::util {

class SpinLock {
 public:
  void lock() noexcept {
    for (int spins = 0;; ++spins) {
      if (!locked_.exchange(true, std::memory_order_acquire)) return;
      while (locked_.load(std::memory_order_relaxed)) {
        if (++spins > 64) {
          std::this_thread::yield();
        } else {
#if defined(__x86_64__) || defined(__i386__)
          __builtin_ia32_pause();
#endif
        }
      }
    }
  }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

}  // namespace plimsoll::engine
