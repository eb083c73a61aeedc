#pragma once
// A seam for tests (tests/threads_idle_release_fork_test.cpp): stop() calls it right after it notified the wake, before
// it releases IdleRelease's lock, so a test can hold the wake's internal mutex there (as a notifier preempted inside
// notify_all does) and fork: the fork handlers must exclude every notifier. Called once per set (it disarms itself).
#include <condition_variable>

namespace plimsoll::runtime {

void set_idle_release_notified_seam(void (*seam)(std::condition_variable_any& wake)) noexcept;

}  // namespace plimsoll::runtime
