#pragma once
// A lock of a layer above the engine that fork() takes first of all (engine/fork_handlers.hpp, step 0), recording
// its owner: a thread may fork while it holds it (the runtime holds its lock across the CUDA driver's load, the GPU
// scan and a backing's construction, and a driver library may fork+exec there), and the preparation then must not
// take it again (a std::mutex locked twice by one thread deadlocks). The forking thread keeps it in the child, as
// in the parent, and releases it when its own scope ends.
#include <atomic>
#include <mutex>
#include <thread>

namespace plimsoll::engine {

class OuterForkLock {
 public:
  void lock() {
    mutex_.lock();
    owner_.store(std::this_thread::get_id(), std::memory_order_relaxed);
    if (auto* seam = held_seam_.load(std::memory_order_acquire)) [[unlikely]] seam(*this);
  }
  void unlock() noexcept {
    owner_.store(std::thread::id(), std::memory_order_relaxed);
    mutex_.unlock();
  }

  /// Only from the fork handlers (the forking thread, one fork at a time): takes the lock unless this thread holds it.
  void lock_for_fork() noexcept {
    // Only this thread writes its own id here, so a relaxed read tells whether it holds the lock.
    if (owner_.load(std::memory_order_relaxed) == std::this_thread::get_id()) {
      kept_by_forking_thread_ = true;
      return;
    }
    fork_asked_.store(true, std::memory_order_release);
    mutex_.lock();  // NOLINT: released by unlock_after_fork
    owner_.store(std::this_thread::get_id(), std::memory_order_relaxed);
  }
  void unlock_after_fork() noexcept {
    fork_asked_.store(false, std::memory_order_release);
    if (kept_by_forking_thread_) {
      kept_by_forking_thread_ = false;
      return;
    }
    unlock();
  }

  // Seams for tests (tests/threads_outer_lock_fork_test.cpp): a thread parks holding a lock until a fork asks for it.
  /// Called by every lock() of any OuterForkLock once it holds it (not by the fork's own); nullptr: none.
  static void set_held_seam(void (*seam)(OuterForkLock&)) noexcept { held_seam_.store(seam, std::memory_order_release); }
  /// True from when a fork()'s preparation asks for this lock until its handlers after the fork released it.
  bool fork_asked() const noexcept { return fork_asked_.load(std::memory_order_acquire); }
  /// Whether the calling thread holds it (a seam's check of what it runs under).
  bool held_by_caller() const noexcept { return owner_.load(std::memory_order_relaxed) == std::this_thread::get_id(); }

 private:
  std::mutex mutex_;
  std::atomic<std::thread::id> owner_{};
  bool kept_by_forking_thread_ = false;  // touched only by the fork handlers
  std::atomic<bool> fork_asked_{false};
  static inline std::atomic<void (*)(OuterForkLock&)> held_seam_{nullptr};
};

}  // namespace plimsoll::engine
