// The engine sits below telemetry: it reports through engine::AllocationObserver (engine/allocation_observer.hpp)
// and includes no telemetry header. Until each layer is its own CMake library, this reads the sources to say so.
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

namespace {

TEST(EngineLayering, NoEngineSourceIncludesATelemetryHeader) {
  const std::filesystem::path engine = std::filesystem::path(PLIMSOLL_SOURCE_DIR) / "src" / "engine";
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(engine)) {
    const std::string extension = entry.path().extension().string();
    if (extension != ".cpp" && extension != ".hpp") continue;
    ++files;
    std::ifstream in(entry.path());
    std::string line;
    for (int number = 1; std::getline(in, line); ++number) {
      if (line.rfind("#include", 0) != 0) continue;
      EXPECT_EQ(line.find("telemetry/"), std::string::npos)
          << entry.path().filename().string() << ":" << number << " includes a telemetry header (" << line
          << "); report through engine::AllocationObserver instead";
    }
  }
  EXPECT_GT(files, 5) << "no engine sources found under " << engine;
}

}  // namespace
