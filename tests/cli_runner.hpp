#pragma once
// Runs the built `plimsoll` binary as a user would, through the shell, and keeps its stdout, stderr and exit
// status apart. Arguments and environment are trusted test strings.
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace plimsoll::testing {

struct CliRun {
  int status = -1;
  std::string out;
  std::string err;
};

inline std::string read_text_file(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

/// `env` is prefixed as shell assignments or an `env ...` command (NAME=value ...).
inline CliRun run_plimsoll(const std::string& args, const std::string& env = "") {
  // One file per test: ctest runs tests in parallel processes, and suites share test names
  // (BadOptionsNameTheProblemAndTheFix), so the suite is part of the name; and the process id, since two checkouts
  // on one machine run the same tests at once and share the temp dir.
  const ::testing::TestInfo& test = *::testing::UnitTest::GetInstance()->current_test_info();
  const std::string err_path = ::testing::TempDir() + "plimsoll_cli_stderr_" + test.test_suite_name() + "." +
                               test.name() + "." + std::to_string(::getpid()) + ".txt";
  const std::string command = env + " " + std::string(PLIMSOLL_CLI_PATH) + " " + args + " 2>" + err_path;
  CliRun run;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    ADD_FAILURE() << "popen failed for " << command;
    return run;
  }
  std::array<char, 4096> buffer{};
  std::size_t got = 0;
  while ((got = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) run.out.append(buffer.data(), got);
  const int wait_status = pclose(pipe);
  run.status = WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : -1;
  run.err = read_text_file(err_path);
  return run;
}

/// The lines of a command's output, without their newlines.
inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream stream(text);
  for (std::string line; std::getline(stream, line);) lines.push_back(line);
  return lines;
}

}  // namespace plimsoll::testing
