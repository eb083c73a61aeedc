#pragma once
// The GPT trace (shared/traces/gpt-6-512-b8.trace) with a 3 MiB tensor no plan has seen, allocated at step 2's begin
// and freed at its end: the step that follows the first plan does not go as planned. Shared by the engine's test of
// that rule (tests/engine_transition_follow_test.cpp) and the CLI's (tests/cli_transition_test.cpp).
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

namespace plimsoll::testing_support {

/// Writes the trace to `file_name` under the test's temporary directory and returns its path (the caller removes it).
inline std::string gpt_with_an_extra_tensor_in_step_2(const std::string& file_name) {
  std::ifstream in(std::string(PLIMSOLL_TRACES_DIR) + "/gpt-6-512-b8.trace");
  std::stringstream out;
  for (std::string line; std::getline(in, line);) {
    if (line == "# step 2 end") out << "f 900000001\n";
    out << line << "\n";
    if (line == "# step 2 begin") out << "a 900000001 3145728\n";
  }
  const std::string path = ::testing::TempDir() + file_name;
  std::ofstream(path) << out.str();
  return path;
}

}  // namespace plimsoll::testing_support
