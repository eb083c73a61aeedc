// A fork()'s child of a process whose IdleRelease thread ran leaves that thread's handle and its wake behind
// (src/runtime/idle_release.cpp, leave_parents_wake): the thread is not in the child, and the wake's copy cannot be
// destroyed. A child that then exits normally (exit(), not _exit()) runs LeakSanitizer's check in the ASan build
// (.ci/run asan): what it left must stay reachable, or the check fails the child (a nonzero exit). Under the engine
// label, which the ASan phase runs (threads_ runs only under ThreadSanitizer); plain builds see a clean exit.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "fork_child.hpp"
#include "idle_release_waiting.hpp"
#include "plimsoll/idle_release.hpp"
#include "sanitized.hpp"  // PLIMSOLL_TEST_UNDER_TSAN

namespace plimsoll {
namespace {

TEST(EngineIdleReleaseChildExit, AChildThatLeftItsParentsThreadExitsNormallyWithoutALeak) {
  auto release = idle_release_test::started_and_waiting();
  std::fflush(nullptr);  // the child's exit() flushes its copies of the buffers: nothing to print twice
  const std::string problem = fork_test::run_in_child([&]() -> int {
    release.reset();  // leaves the parent's thread handle and wake behind
    std::exit(0);     // a normal exit: LeakSanitizer's check runs in the ASan build
  });
  EXPECT_EQ(problem, "") << "LeakSanitizer reported what the child left behind";
  release.reset();
}

// Not under ThreadSanitizer: the child starts a thread of its own, which TSan refuses after a multi-threaded fork.
TEST(EngineIdleReleaseChildExit, AGrandchildLeavesBothAncestorsThreadsAndExitsNormally) {
#ifdef PLIMSOLL_TEST_UNDER_TSAN
  GTEST_SKIP() << "ThreadSanitizer refuses a thread started in the child of a multi-threaded fork";
#endif
  auto release = idle_release_test::started_and_waiting();
  std::fflush(nullptr);
  const std::string problem = fork_test::run_in_child([&]() -> int {
    auto own = idle_release_test::started_and_waiting();  // the child's own thread, then a grandchild of it
    std::fflush(nullptr);
    const std::string inner = fork_test::run_in_child([&]() -> int {
      own.reset();
      release.reset();
      std::exit(0);
    });
    own.reset();
    release.reset();
    if (!inner.empty()) return 3;
    std::exit(0);
  });
  EXPECT_EQ(problem, "");
  release.reset();
}

}  // namespace
}  // namespace plimsoll
