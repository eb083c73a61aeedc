// launch_ranks (launcher.hpp): fork/exec one process per rank, wait, and stop the others when one fails.
#include "train/launcher.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "devices/proc_text.hpp"
#include "plimsoll/error.hpp"

namespace plimsoll::train {
namespace {

// A port the kernel says is free on the loopback interface. Another process could take it before rank 0 binds it;
// rank 0 then fails to start its store, and the message says which port.
std::uint16_t free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw InvalidState(fmt::format("no socket for a rendezvous port: {}", std::strerror(errno)));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof address;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  ::close(fd);
  if (!ok) throw InvalidState(fmt::format("no free loopback port for the rendezvous: {}", std::strerror(errno)));
  return ntohs(address.sin_port);
}

[[noreturn]] void exec_rank(const LaunchOptions& options, int rank, std::uint16_t port, pid_t launcher) {
  // A rank must not outlive the launcher: killed with it, whatever killed it.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != launcher) std::_Exit(127);
  if (rank != 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    if (null >= 0) ::dup2(null, STDOUT_FILENO);
  }
  ::setenv("RANK", std::to_string(rank).c_str(), 1);
  ::setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
  ::setenv("WORLD_SIZE", std::to_string(options.processes).c_str(), 1);
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  ::setenv(kLaunchedRankVariable, "1", 1);
  std::vector<char*> argv;
  for (const std::string& word : options.command) argv.push_back(const_cast<char*>(word.c_str()));
  argv.push_back(nullptr);
  ::execv("/proc/self/exe", argv.data());
  std::fprintf(stderr, "plimsoll train: rank %d could not start: %s\n", rank, std::strerror(errno));
  std::_Exit(127);
}

std::string describe(int status) {
  if (WIFSIGNALED(status)) {
    const int signal = WTERMSIG(status);
    return fmt::format("was killed by signal {} ({})", signal, ::sigabbrev_np(signal) ? ::sigabbrev_np(signal) : "?");
  }
  return fmt::format("exited with status {}", WEXITSTATUS(status));
}

int exit_status_of(int status) { return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status); }

}  // namespace

std::vector<std::string> own_command_line() {
  const std::string text = read_text_file("/proc/self/cmdline").value_or("");
  std::vector<std::string> words;
  std::string word;
  for (char c : text) {
    if (c == '\0') {
      words.push_back(word);
      word.clear();
    } else {
      word.push_back(c);
    }
  }
  if (!word.empty()) words.push_back(word);
  return words;
}

int launch_ranks(const LaunchOptions& options) {
  if (options.processes < 1) throw InvalidArgument("--nproc must be at least 1");
  if (options.command.empty()) throw InvalidState("no command line to start the ranks with");
  const std::uint16_t port = free_loopback_port();
  const pid_t launcher = ::getpid();
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> pids(static_cast<std::size_t>(options.processes), -1);
  for (int rank = 0; rank < options.processes; ++rank) {
    const pid_t pid = ::fork();
    if (pid < 0) {
      for (pid_t started : pids) {
        if (started > 0) ::kill(started, SIGKILL);
      }
      throw InvalidState(fmt::format("could not start rank {}: {}", rank, std::strerror(errno)));
    }
    if (pid == 0) exec_rank(options, rank, port, launcher);
    pids[static_cast<std::size_t>(rank)] = pid;
    if (!options.quiet) fmt::print(stderr, "plimsoll train: started rank {} of {} (pid {})\n", rank, options.processes, pid);
  }

  int running = options.processes;
  int job_status = 0;
  bool failed = false;
  auto deadline = std::chrono::steady_clock::time_point::max();
  while (running > 0) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, failed ? WNOHANG : 0);
    if (pid < 0 && errno == EINTR) continue;
    if (pid < 0) break;  // no children left
    if (pid == 0) {      // the others are still stopping
      if (std::chrono::steady_clock::now() > deadline) {
        for (std::size_t r = 0; r < pids.size(); ++r) {
          if (pids[r] <= 0) continue;
          fmt::print(stderr, "plimsoll train: rank {} (pid {}) did not stop within {} s of the failure: killing it\n", r,
                     pids[r], options.grace.count() / 1000);
          ::kill(pids[r], SIGKILL);
        }
        deadline = std::chrono::steady_clock::time_point::max();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    std::size_t rank = 0;
    while (rank < pids.size() && pids[rank] != pid) ++rank;
    if (rank == pids.size()) continue;
    pids[rank] = -1;
    --running;
    const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (ok) continue;
    const bool stopped_by_other = WIFEXITED(status) && WEXITSTATUS(status) == kExitStoppedByOtherRank;
    if (!failed) {
      failed = true;
      deadline = std::chrono::steady_clock::now() + options.grace;
      if (running > 0) {
        fmt::print(stderr, "plimsoll train: rank {} (pid {}) {}; stopping the other ranks\n", rank, pid,
                   describe(status));
      } else {
        fmt::print(stderr, "plimsoll train: rank {} (pid {}) {}\n", rank, pid, describe(status));
      }
      // A rank that died without a word (killed) leaves the others blocked in a collective until its sockets
      // close, which is at once; one that hangs is what the grace period is for.
      job_status = exit_status_of(status);
    } else if (job_status == kExitStoppedByOtherRank && !stopped_by_other) {
      job_status = exit_status_of(status);  // the root cause, if the first to leave was only its messenger
    }
  }
  return job_status;
}

}  // namespace plimsoll::train
