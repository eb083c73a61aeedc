// IdleRelease: returns the cached memory of devices that went idle (include/plimsoll/idle_release.hpp).
#include "plimsoll/idle_release.hpp"

#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "engine/fork_handlers.hpp"
#include "engine/outer_fork_lock.hpp"
#include "plimsoll/allocator.hpp"
#include "plimsoll/error.hpp"
#include "plimsoll/stats.hpp"
#include "runtime/idle_release_seam.hpp"

namespace plimsoll {
namespace {
std::atomic<void (*)(std::condition_variable_any&)> notified_seam{nullptr};
}  // namespace

void runtime::set_idle_release_notified_seam(void (*seam)(std::condition_variable_any&)) noexcept {
  notified_seam.store(seam, std::memory_order_release);
}

void IdleReleaseOptions::validate() const {
  if (idle_after.count() <= 0 || check_every.count() <= 0) {
    throw InvalidArgument("idle release: idle_after and check_every must be positive durations (milliseconds); "
                          "to keep cached memory mapped, do not start an IdleRelease");
  }
  if (check_every > idle_after) {
    throw InvalidArgument("idle release: check_every (" + std::to_string(check_every.count()) +
                          " ms) is longer than idle_after (" + std::to_string(idle_after.count()) +
                          " ms); check at least as often as the idle time, e.g. a tenth of it");
  }
}

IdleReleaseOptions host_idle_release_defaults() { return IdleReleaseOptions{}; }

// The lock is an outer lock of the engine's fork handlers (docs/engine.md, "fork()"): poll() holds it while it takes
// device locks (stats(), trim()), so it comes before every engine lock, and nothing takes it under one.
struct IdleRelease::State {
  struct Watched {
    Allocator* device = nullptr;
    std::uint64_t activity = 0;  // allocations + frees when last seen
    std::chrono::steady_clock::time_point quiet_since{};
    bool seen = false;
  };

  State() { engine::register_outer_fork_lock(lock); }
  ~State() { engine::unregister_outer_fork_lock(lock); }
  State(const State&) = delete;
  State& operator=(const State&) = delete;

  mutable engine::OuterForkLock lock;
  std::vector<Watched> watched;
  std::uint64_t released_bytes = 0;
  std::uint64_t releases = 0;
  // What the background thread waits on between looks. A thread waiting on it at a fork() is in the child's copy as a
  // waiter that never leaves: the child could not destroy it (pthread_cond_destroy waits for the waiters) nor trust
  // its internal mutex, which that thread may have held. So a child leaves its parent's behind (leave_parents_wake)
  // and makes its own; a left one keeps the parent's thread handle too, and stays reachable (LeakSanitizer checks a
  // child that exits normally) through left_behind, a list threaded through the left wakes themselves: nothing is
  // allocated, and a process holds one per IdleRelease its parent (or an ancestor) ran a thread of.
  struct Wake {
    std::condition_variable_any condition;
    std::thread parents_thread;  // not here to join; a detach would act on a thread of another process (TSan refuses)
    Wake* left_before = nullptr;
  };
  static inline std::atomic<Wake*> left_behind{nullptr};

  std::unique_ptr<Wake> wake = std::make_unique<Wake>();
  bool stopping = false;
  std::thread thread;
  pid_t thread_process = 0;  // the process the thread runs in: a fork()'s child has none to join

  /// In a fork()'s child of a process whose thread ran: leaves that thread's handle and its wake behind. With the
  /// lock held. The thread was started with a wake, and only this takes the wake away, so `wake` is set here.
  bool in_child_of_thread() const { return thread.joinable() && thread_process != ::getpid(); }
  void leave_parents_wake() noexcept {
    Wake* left = wake.release();
    left->parents_thread = std::move(thread);
    left->left_before = left_behind.load(std::memory_order_relaxed);
    while (!left_behind.compare_exchange_weak(left->left_before, left, std::memory_order_release,
                                              std::memory_order_relaxed)) {
    }
  }
};

IdleRelease::IdleRelease(std::vector<Allocator*> devices, IdleReleaseOptions options)
    : options_(options), state_(std::make_unique<State>()) {
  options_.validate();
  for (Allocator* device : devices) {
    if (device == nullptr) throw InvalidArgument("idle release: a null device; pass the devices to watch");
    state_->watched.push_back(State::Watched{device});
  }
}

IdleRelease::~IdleRelease() { stop(); }

void IdleRelease::watch(Allocator& device) {
  std::lock_guard lock(state_->lock);
  state_->watched.push_back(State::Watched{&device});
}

std::uint64_t IdleRelease::poll(std::chrono::steady_clock::time_point now) {
  std::lock_guard lock(state_->lock);
  std::uint64_t released = 0;
  for (State::Watched& watched : state_->watched) {
    const Stats stats = watched.device->stats();
    const std::uint64_t activity = stats.allocations + stats.frees;
    if (!watched.seen || activity != watched.activity) {
      // Busy since the last look (or first look): its cache is the working set of what it is doing.
      watched.seen = true;
      watched.activity = activity;
      watched.quiet_since = now;
      continue;
    }
    const std::uint64_t cached =
        stats.reserved_bytes > stats.in_use_bytes ? stats.reserved_bytes - stats.in_use_bytes : 0;
    if (cached <= options_.keep_cached_bytes || now - watched.quiet_since < options_.idle_after) continue;
    const std::uint64_t given_back = watched.device->trim();
    if (given_back > 0) {
      released += given_back;
      ++state_->releases;
    }
  }
  state_->released_bytes += released;
  return released;
}

void IdleRelease::start() {
  std::lock_guard guard(state_->lock);
  if (state_->stopping) return;
  if (state_->thread.joinable() && !state_->in_child_of_thread()) return;
  auto own_wake = std::make_unique<State::Wake>();  // before anything changes: may throw
  if (state_->in_child_of_thread()) state_->leave_parents_wake();
  if (state_->wake == nullptr) state_->wake = std::move(own_wake);
  state_->thread_process = ::getpid();
  state_->thread = std::thread([this] {
    std::unique_lock lock(state_->lock);
    while (!state_->stopping) {
      state_->wake->condition.wait_for(lock, options_.check_every, [this] { return state_->stopping; });
      if (state_->stopping) break;
      lock.unlock();  // poll takes the lock itself
      poll(std::chrono::steady_clock::now());
      lock.lock();
    }
  });
}

void IdleRelease::stop() {
  {
    std::lock_guard lock(state_->lock);
    state_->stopping = true;
    // A fork()'s child: the parent's thread is not here to wake or join (joining would wait forever).
    if (state_->in_child_of_thread()) state_->leave_parents_wake();
    // Notified under the lock: notify_all holds the wake's internal mutex, and the fork handlers take only this lock,
    // so a fork() between would give the child that mutex held, and its stop() (or destructor) would hang there.
    if (state_->wake != nullptr) {
      state_->wake->condition.notify_all();
      if (auto* seam = notified_seam.exchange(nullptr, std::memory_order_acq_rel)) [[unlikely]] {
        seam(state_->wake->condition);
      }
    }
  }
  // Its thread (if any) was started in this process; it stops at once, since start() does nothing once stopping.
  if (state_->thread.joinable()) state_->thread.join();
}

std::uint64_t IdleRelease::released_bytes() const {
  std::lock_guard lock(state_->lock);
  return state_->released_bytes;
}

std::uint64_t IdleRelease::releases() const {
  std::lock_guard lock(state_->lock);
  return state_->releases;
}

}  // namespace plimsoll
