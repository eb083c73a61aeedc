#pragma once
// An IdleRelease whose background thread waits for its next look when the test forks: a fork while that thread is
// still starting (or on its way into the wait) copies whatever the thread holds then, the sanitizers' runtimes'
// locks included, and the child's exit can hang on them. Shared by the fork tests of IdleRelease.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/outer_fork_lock.hpp"
#include "plimsoll/idle_release.hpp"

namespace plimsoll::idle_release_test {

// Whether every thread of this process but the caller is asleep (state S in /proc: the IdleRelease thread blocked in
// its wait, not on its way there).
inline bool other_threads_sleep() {
  const std::string self = std::to_string(::gettid());
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    if (task.path().filename() == self) continue;
    std::ifstream stat(task.path() / "stat");
    std::string text;
    std::getline(stat, text);  // one line
    const std::size_t name_end = text.rfind(')');
    if (name_end == std::string::npos || name_end + 2 >= text.size()) continue;  // the task ended meanwhile
    if (text[name_end + 2] != 'S') return false;
  }
  return true;
}

inline std::atomic<int> g_outer_locks_taken{0};
inline void count_lock(engine::OuterForkLock&) { g_outer_locks_taken.fetch_add(1); }

// An IdleRelease whose started thread has reached its wait: it took the lock (OuterForkLock's seam counts it) and
// then released it inside condition_variable_any::wait_for, and sleeps there.
inline std::unique_ptr<IdleRelease> started_and_waiting() {
  IdleReleaseOptions options;
  options.idle_after = std::chrono::hours(1);
  options.check_every = std::chrono::hours(1);  // the thread waits for the whole test
  auto release = std::make_unique<IdleRelease>(std::vector<Allocator*>{}, options);
  g_outer_locks_taken = 0;
  engine::OuterForkLock::set_held_seam(&count_lock);
  release->start();
  while (g_outer_locks_taken.load() == 0) std::this_thread::yield();
  engine::OuterForkLock::set_held_seam(nullptr);
  (void)release->releases();  // the thread released the lock: it is inside wait_for
  while (!other_threads_sleep()) std::this_thread::yield();  // and blocked in it (a waiter of the wake)
  return release;
}

}  // namespace plimsoll::idle_release_test
