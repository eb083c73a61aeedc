// fork() while IdleRelease's background thread waits for its next look (src/runtime/idle_release.cpp): the child's
// copy of the wake (a std::condition_variable_any) lists that thread as a waiter, and the thread does not exist in
// the child. Destroying the copy (pthread_cond_destroy waits for its waiters) hung the child every time, and its
// internal mutex may be held by that thread. The child now leaves its parent's wake behind: it stops and destroys its
// IdleRelease, or starts one of its own. The parent's thread is made to wait first (a long check_every), then the
// main thread forks; the child must exit cleanly in time (fork_child.hpp).
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/outer_fork_lock.hpp"
#include "fork_child.hpp"
#include "idle_release_waiting.hpp"
#include "plimsoll/idle_release.hpp"
#include "runtime/idle_release_seam.hpp"
#include "sanitized.hpp"  // PLIMSOLL_TEST_UNDER_TSAN


namespace plimsoll {
namespace {

TEST(ThreadsIdleReleaseFork, AChildDestroysAnIdleReleaseWhoseThreadWaitedAtTheFork) {
  auto release = idle_release_test::started_and_waiting();
  const std::string problem = fork_test::run_in_child([&] {
    release.reset();  // stop(), then the destructor: hung here in pthread_cond_destroy before
    return 0;
  });
  EXPECT_EQ(problem, "") << "the child hung on its copy of the parent's wake";
  release.reset();  // the parent's own thread is woken and joined
}

TEST(ThreadsIdleReleaseFork, AChildStartsAThreadOfItsOwnAndStopsIt) {
  auto release = idle_release_test::started_and_waiting();
  const std::string problem = fork_test::run_in_child([&] {
#ifndef PLIMSOLL_TEST_UNDER_TSAN
    release->start();  // a thread of its own, on a wake of its own
#endif
    release->stop();
    if (release->releases() != 0) return 2;
    release.reset();
    return 0;
  });
  EXPECT_EQ(problem, "");
  release->stop();
  EXPECT_EQ(release->releases(), 0U);
}

// A notifier preempted inside notify_all holds the wake's internal mutex: a fork() then must not happen, or a child
// whose thread is not joinable (never started, or joined) locks the copied mutex in its stop() and hangs. The seam,
// called in stop() right after the notify, holds that mutex the only way a test can: condition_variable_any::wait_for
// calls the user lock's unlock() with its internal mutex held, and ParkingLock's unlock() parks there. It parks until
// the fork asks for IdleRelease's lock while this thread holds it (the fork then waits: the fixed order), or until
// the parent returned from the fork (it went through: the child got the held mutex and hangs).
engine::OuterForkLock* g_release_lock = nullptr;
std::atomic<bool> g_parked{false};
std::atomic<bool> g_forked{false};
void record_lock(engine::OuterForkLock& lock) { g_release_lock = &lock; }

struct ParkingLock {
  void lock() {}
  void unlock() {
    g_parked = true;
    while (!g_forked.load() && !(g_release_lock->fork_asked() && g_release_lock->held_by_caller())) {
      std::this_thread::yield();
    }
  }
};

void hold_wake_mutex(std::condition_variable_any& wake) {
  ParkingLock parking;
  wake.wait_for(parking, std::chrono::seconds(0));  // parks in unlock(), the internal mutex held, then times out
}

TEST(ThreadsIdleReleaseFork, AForkWaitsForANotifierSoTheChildCanStop) {
  IdleReleaseOptions options;
  options.idle_after = std::chrono::hours(1);
  options.check_every = std::chrono::hours(1);
  IdleRelease release(std::vector<Allocator*>{}, options);  // never started: the child's stop() only notifies
  engine::OuterForkLock::set_held_seam(&record_lock);
  (void)release.releases();  // this thread takes IdleRelease's lock: the seam records which it is
  engine::OuterForkLock::set_held_seam(nullptr);
  ASSERT_NE(g_release_lock, nullptr);
  g_parked = false;
  g_forked = false;
  runtime::set_idle_release_notified_seam(&hold_wake_mutex);
  std::thread stopper([&] {
    release.stop();
    while (!g_forked.load()) std::this_thread::yield();  // alive at the fork (a finished thread is a leak to TSan)
  });
  while (!g_parked.load()) std::this_thread::yield();
  const std::string problem = fork_test::run_in_child(
      [&] {
        release.stop();  // hung here on the copied internal mutex before
        return 0;
      },
      [] { g_forked = true; });
  stopper.join();
  EXPECT_EQ(problem, "") << "the fork copied the wake's internal mutex held by a notifier";
}

}  // namespace
}  // namespace plimsoll
