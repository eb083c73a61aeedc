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
    lock();  // NOLINT: released by unlock_after_fork
  }
  void unlock_after_fork() noexcept {
    if (kept_by_forking_thread_) {
      kept_by_forking_thread_ = false;
      return;
    }
    unlock();
  }

 private:
  std::mutex mutex_;
  std::atomic<std::thread::id> owner_{};
  bool kept_by_forking_thread_ = false;  // touched only by the fork handlers
};

}  // namespace plimsoll::engine
