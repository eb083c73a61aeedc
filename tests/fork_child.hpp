#pragma once
// The parent's side of the fork() tests: a child that hangs is the failure they look for (a lock or a flag copied
// from a thread that does not exist in the child), so the parent waits with a deadline and kills a child that has
// not exited by then, instead of hanging the test run.
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
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

/// Forks; the child runs `work` and _exits with what it returned (0: every check passed, else the failed check's
/// number); the parent runs `forked` (if any) and waits with the deadline. Empty when the child exited 0 in time, else
/// what went wrong.
inline std::string run_in_child(const std::function<int()>& work, const std::function<void()>& forked = {}) {
  const pid_t child = fork();
  if (child == -1) return "fork() failed";
  if (child == 0) _exit(work());
  if (forked) forked();
  int status = 0;
  if (!child_exited_in_time(child, status)) return "the child hung (a lock held by a thread that does not exist in it)";
  if (!WIFEXITED(status)) return "the child did not exit normally";
  if (WEXITSTATUS(status) != 0) return "the child's check number " + std::to_string(WEXITSTATUS(status)) + " failed";
  return {};
}

/// A thread that parks inside a lock until a fork asks for it: `enter` takes the lock and, through the test's seam,
/// parks while holding it (park() here, or a seam of its own); wait for it to park before forking. The thread stays
/// alive after `enter` returns (a thread that finished unjoined before the fork is a leak to ThreadSanitizer in the
/// child) until the object is destroyed. The thread stays alive until the object is destroyed (TSan), which first releases
/// a park the fork never asked for.
class ParkedHolder {
 public:
  explicit ParkedHolder(std::function<void()> enter)
      : thread_([this, enter = std::move(enter)] {
          enter();
          done_ = true;
          while (!may_exit_.load()) std::this_thread::yield();
        }) {}
  ~ParkedHolder() {
    release_ = true;
    may_exit_ = true;
    thread_.join();
  }
  ParkedHolder(const ParkedHolder&) = delete;
  ParkedHolder& operator=(const ParkedHolder&) = delete;

  void wait_until_parked() const {
    while (!parked_.load()) std::this_thread::yield();
  }
  /// Until `enter` returned (after the parent released whatever the fork did not wait for).
  void wait_until_done() const {
    while (!done_.load()) std::this_thread::yield();
  }

  /// From the seam, with the lock held: returns once `asked()` (the fork asks for the lock) or the test ends.
  void park(const std::function<bool()>& asked) {
    parked_ = true;
    while (!asked() && !release_.load()) std::this_thread::yield();
  }

 private:
  std::atomic<bool> parked_{false}, release_{false}, done_{false}, may_exit_{false};
  std::thread thread_;  // last: started once the flags exist
};

}  // namespace plimsoll::fork_test
