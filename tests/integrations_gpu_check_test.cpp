// scripts/gpu-check.sh on a machine without a CUDA driver (CI): it must say so, write its JSON and markdown with the
// reason, run nothing else and exit with its documented status 3, not crash or claim a pass.
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <dlfcn.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace {

using ::testing::HasSubstr;

TEST(GpuCheckScript, WithoutADriverSaysSoAndExitsThree) {
  if (void* driver = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL); driver != nullptr) {
    ::dlclose(driver);
    GTEST_SKIP() << "a CUDA driver is installed: scripts/gpu-check.sh runs the real checks here";
  }
  const std::string out = ::testing::TempDir() + "gpu_check_out";
  std::filesystem::remove_all(out);
  const std::string command =
      "OUT='" + out + "' '" + std::string(PLIMSOLL_SOURCE_DIR) + "/scripts/gpu-check.sh' 2>&1";
  std::string output;
  FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  char buffer[4096];
  std::size_t got = 0;
  while ((got = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) output.append(buffer, got);
  const int status = ::pclose(pipe);
  ASSERT_TRUE(WIFEXITED(status)) << output;
  EXPECT_EQ(WEXITSTATUS(status), 3) << output;
  EXPECT_THAT(output, HasSubstr("no CUDA driver"));
  EXPECT_THAT(output, HasSubstr("libcuda.so.1"));

  std::ifstream json_file(out + "/gpu-check.json");
  ASSERT_TRUE(json_file) << "no gpu-check.json in " << out;
  const nlohmann::json result = nlohmann::json::parse(json_file);
  EXPECT_EQ(result["status"], "no CUDA driver");
  ASSERT_EQ(result["checks"].size(), 1u) << "nothing else may run without a driver";
  EXPECT_EQ(result["checks"][0]["status"], "skip");
  EXPECT_THAT(result["checks"][0]["detail"].get<std::string>(), HasSubstr("run this on a GPU machine"));
  std::ifstream table(out + "/gpu-check.md");
  std::stringstream text;
  text << table.rdbuf();
  EXPECT_THAT(text.str(), HasSubstr("| CUDA driver | skip |"));
}

}  // namespace
