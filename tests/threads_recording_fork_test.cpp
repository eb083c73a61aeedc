// fork() beside a recording's own lock (src/telemetry/recording/recorder.hpp): every observed event takes it under
// a device lock, and marker(), step(), close() take it alone. A thread blocked holding it at the fork would leave
// it held in the child, whose next event or marker would hang. The recording writes to a FIFO kept full, so its
// close() blocks inside write() holding the lock; it is drained once the fork's preparation waits for that lock
// (engine::fork_locking_participant_members(), the seam), or once the fork is done (the code before: then the
// child inherits the lock held). The parent fails the test if the child does not exit cleanly in time.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "engine/fork_handlers.hpp"
#include "plimsoll/recording.hpp"

#include "fork_child.hpp"

namespace plimsoll {
namespace {

// Whether thread `tid` of this process is inside a write() system call now (/proc/self/task/TID/syscall).
bool inside_write(pid_t tid) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/syscall");
  long number = -1;
  in >> number;
  return in && number == SYS_write;
}

TEST(ThreadsRecordingFork, ForkWhileAnotherThreadHoldsARecordingsLockLeavesAWorkingChild) {
  const std::string fifo = testing::TempDir() + "plimsoll_recording_fork_" + std::to_string(getpid()) + ".fifo";
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << "mkfifo " << fifo;
  const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0);
  std::shared_ptr<Recording> recording = Recording::open(fifo);
  {
    // Fills the pipe, so the recording's next write blocks.
    const int filler = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    ASSERT_GE(filler, 0);
    const std::vector<char> chunk(4096, 'x');
    while (::write(filler, chunk.data(), chunk.size()) > 0) {
    }
    ASSERT_EQ(errno, EAGAIN);
    ::close(filler);
  }

  std::atomic<pid_t> writer_tid{0};
  std::atomic<bool> writer_done{false}, writer_may_exit{false};
  std::thread writer([&] {
    writer_tid = static_cast<pid_t>(::syscall(SYS_gettid));
    recording->close();  // the end record's write blocks, under the recording's lock
    writer_done = true;
    while (!writer_may_exit.load()) std::this_thread::yield();  // alive until the parent is done (TSan)
  });
  std::thread drainer([&] {
    while (!engine::fork_preparing()) std::this_thread::yield();
    while (engine::fork_preparing() && !engine::fork_locking_participant_members()) std::this_thread::yield();
    std::vector<char> chunk(1 << 16);
    while (!writer_done.load()) {
      if (::read(reader, chunk.data(), chunk.size()) <= 0) std::this_thread::yield();
    }
  });
  while (writer_tid.load() == 0 || !inside_write(writer_tid.load())) std::this_thread::yield();

  const pid_t child = fork();
  ASSERT_NE(child, -1);
  if (child == 0) {
    recording->marker("in the child");  // the recording's lock: hung on the code before
    step();                              // the registry of open recordings
    _exit(recording->closed() ? 0 : 2);
  }
  int status = 0;
  const bool exited = fork_test::child_exited_in_time(child, status);
  drainer.join();
  writer_may_exit = true;
  writer.join();
  ::close(reader);
  ::unlink(fifo.c_str());
  EXPECT_TRUE(exited) << "the child hung: a recording's lock, held by a thread that does not exist in it";
  if (exited) {
    EXPECT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "the child's check number " << WEXITSTATUS(status) << " failed";
  }
  EXPECT_TRUE(recording->closed());
  recording->marker("after");  // the parent's lock was given back
}

}  // namespace
}  // namespace plimsoll
