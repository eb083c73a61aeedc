// The README's library example must be the program in examples/quickstart.cpp, which ctest builds and runs: every
// line of the README's C++ block stands in that file, in the same order.
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace {

std::string read_file(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

std::string trimmed(const std::string& line) {
  const std::size_t first = line.find_first_not_of(" \t");
  if (first == std::string::npos) return {};
  return line.substr(first, line.find_last_not_of(" \t") - first + 1);
}

// The non-blank lines of the first fenced block that opens with "```cpp".
std::vector<std::string> first_cpp_block(const std::string& markdown) {
  std::vector<std::string> lines;
  std::istringstream stream(markdown);
  bool inside = false;
  for (std::string line; std::getline(stream, line);) {
    if (!inside && line == "```cpp") {
      inside = true;
    } else if (inside && line == "```") {
      break;
    } else if (inside && !trimmed(line).empty()) {
      lines.push_back(trimmed(line));
    }
  }
  return lines;
}

TEST(Readme, LibraryExampleIsTheQuickstartProgram) {
  const std::vector<std::string> shown = first_cpp_block(read_file(std::string(PLIMSOLL_SOURCE_DIR) + "/README.md"));
  ASSERT_GE(shown.size(), 5u) << "README.md has no ```cpp block";
  std::istringstream program(read_file(std::string(PLIMSOLL_SOURCE_DIR) + "/examples/quickstart.cpp"));
  std::size_t next = 0;
  for (std::string line; next < shown.size() && std::getline(program, line);) {
    if (trimmed(line) == shown[next]) ++next;
  }
  ASSERT_EQ(next, shown.size()) << "examples/quickstart.cpp lacks this README line (or has it out of order):\n  "
                                << shown[next];
}

}  // namespace
