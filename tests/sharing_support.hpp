#pragma once
// Helpers for the GPU-sharing tests: a private ledger directory, live processes to stand in for ledger members
// (a ledger only keeps entries of running processes), programs (the plimsoll CLI among them) run with an environment
// of their own, an Allocator of a simulated GPU under a share, and the message of an expected error.
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backings/sim_backing.hpp"
#include "plimsoll/allocator.hpp"
#include "plimsoll/sharing.hpp"
#include "sharing/process_identity.hpp"
#include "sharing/shared_gpu_backing.hpp"

namespace plimsoll::testing {

/// A fresh directory under the test temp dir, removed with everything in it.
class TempDirectory {
 public:
  TempDirectory() {
    std::string pattern = ::testing::TempDir() + "plimsoll_share_XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDirectory() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDirectory(const TempDirectory&) = delete;
  TempDirectory& operator=(const TempDirectory&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

/// A child that sleeps until killed: a running process whose identity a ledger entry can carry.
class LiveProcess {
 public:
  LiveProcess() {
    pid_ = ::fork();
    if (pid_ == 0) {
      for (;;) ::pause();
    }
    // Wait until /proc shows it, so its start time is readable.
    for (int i = 0; i < 1000 && !sharing::is_running(identity()); ++i) ::usleep(1000);
  }
  ~LiveProcess() { kill(); }
  LiveProcess(const LiveProcess&) = delete;
  LiveProcess& operator=(const LiveProcess&) = delete;

  sharing::ProcessIdentity identity() const {
    sharing::ProcessIdentity who{.pid = pid_, .start_time = 0};
    const std::string path = "/proc/" + std::to_string(pid_) + "/stat";
    if (FILE* file = std::fopen(path.c_str(), "r")) {
      char text[1024] = {};
      const std::size_t got = std::fread(text, 1, sizeof text - 1, file);
      std::fclose(file);
      if (const auto stat = sharing::parse_proc_stat(std::string_view(text, got))) who.start_time = stat->start_time;
    }
    return who;
  }
  /// SIGKILL, then reaped.
  void kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  int pid() const { return pid_; }

 private:
  int pid_ = -1;
};

struct ProgramRun {
  int status = -1;  // exit status, or -signal
  std::string out;
  std::string err;
};

/// The whole text of the file at `path`; empty when it cannot be read.
inline std::string read_text(const std::string& path) {
  std::string text;
  if (FILE* file = std::fopen(path.c_str(), "r")) {
    char buffer[4096];
    for (std::size_t got; (got = std::fread(buffer, 1, sizeof buffer, file)) > 0;) text.append(buffer, got);
    std::fclose(file);
  }
  return text;
}

/// In a forked child: adds `environment` to this process's, sends stdout and stderr to the two files, and runs
/// `argv` (exit status 127 when it cannot be run).
[[noreturn]] inline void exec_program(const std::vector<std::string>& argv,
                                      const std::map<std::string, std::string>& environment,
                                      const std::string& out_path, const std::string& err_path) {
  for (const auto& [name, value] : environment) ::setenv(name.c_str(), value.c_str(), 1);
  const int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (out < 0 || err < 0) ::_exit(126);  // no output files: the caller sees status 126 and empty output
  ::dup2(out, 1);
  ::dup2(err, 2);
  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  ::execv(args[0], args.data());
  ::_exit(127);
}

/// Runs `argv` with `environment` added to this process's, waits, and returns its output.
inline ProgramRun run_program(const std::vector<std::string>& argv, const std::map<std::string, std::string>& environment) {
  static std::atomic<int> runs{0};  // one file pair per run: tests run programs from several threads at once
  const std::string stem = ::testing::TempDir() + "plimsoll_share_run_" + std::to_string(::getpid()) + "_" +
                           std::to_string(runs.fetch_add(1));
  const std::string out_path = stem + ".out", err_path = stem + ".err";
  const pid_t child = ::fork();
  if (child == 0) exec_program(argv, environment, out_path, err_path);
  int status = 0;
  ::waitpid(child, &status, 0);
  ProgramRun run;
  run.status = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  run.out = read_text(out_path);
  run.err = read_text(err_path);
  std::remove(out_path.c_str());
  std::remove(err_path.c_str());
  return run;
}

#ifdef PLIMSOLL_CLI_PATH
/// Runs the built `plimsoll` with `args` (and `environment` added).
inline ProgramRun plimsoll_command(const std::vector<std::string>& args,
                                   const std::map<std::string, std::string>& environment = {}) {
  std::vector<std::string> argv = {PLIMSOLL_CLI_PATH};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_program(argv, environment);
}
#endif

/// An Allocator named cuda:0 over a simulated device of `device_bytes` (the limit when 0), under `share`: every map
/// charged to the share's ledger.
inline std::unique_ptr<Allocator> shared_sim_allocator(GpuShare& share, std::uint64_t limit,
                                                       std::uint64_t device_bytes = 0) {
  if (device_bytes == 0) device_bytes = limit;
  DeviceDescription description;
  description.name = "cuda:0";
  description.hardware = "simulated";
  description.limit_bytes = limit;
  description.total_bytes = device_bytes;
  return std::make_unique<Allocator>(
      description, make_shared_gpu_backing(share, std::make_unique<backings::SimBacking>(device_bytes)));
}

/// What `body` threw, or "(no error)".
inline std::string error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const std::exception& error) {
    return error.what();
  }
  return "(no error)";
}

}  // namespace plimsoll::testing
