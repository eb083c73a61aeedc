#pragma once
// The parent's side of the fork() tests: a child that hangs is the failure they look for (a lock or a flag copied
// from a thread that does not exist in the child), so the parent waits with a deadline and kills a child that has
// not exited by then, instead of hanging the test run.
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <chrono>
#include <thread>

namespace plimsoll::fork_test {

/// Waits up to `limit` for `child`: true when it exited (its wait status in `status`); false when it hung (it is
/// then killed and reaped) or cannot be waited for.
inline bool child_exited_in_time(pid_t child, int& status, std::chrono::seconds limit = std::chrono::seconds(20)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    const pid_t done = waitpid(child, &status, WNOHANG);
    if (done == child) return true;
    if (done == -1) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  kill(child, SIGKILL);
  waitpid(child, &status, 0);
  return false;
}

}  // namespace plimsoll::fork_test
