// `plimsoll devices`, run as a user would: the real binary, configured through the environment.
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_runner.hpp"

namespace {

using testing::HasSubstr;
using testing::StartsWith;

using plimsoll::testing::CliRun;
using plimsoll::testing::run_plimsoll;

class DevicesCommand : public testing::Test {
 protected:
  void SetUp() override {
    config_path_ = std::filesystem::temp_directory_path() /
                   ("plimsoll_devices_command_test_" + std::to_string(::getpid()) + ".json");
    std::ofstream(config_path_) << R"({"devices": {"sim:8GiB": {"logical_devices": ["3GiB", "2GiB"]}}})";
  }
  void TearDown() override { std::filesystem::remove(config_path_); }

  std::string environment() const {
    // A known environment whatever the test runner's is; the config file adds a split simulated device.
    return "env -u CUDA_VISIBLE_DEVICES -u PLIMSOLL_MEMORY_LIMIT -u PLIMSOLL_MEMORY_FRACTION -u PLIMSOLL_RESERVE "
           "PLIMSOLL_VISIBLE_DEVICES=0 PLIMSOLL_CONFIG=" +
           config_path_.string();
  }

  std::filesystem::path config_path_;
};

TEST_F(DevicesCommand, JsonListsTheHostTheSplitAndTheVisibilityLines) {
  const CliRun run = run_plimsoll("devices --json", environment());
  ASSERT_EQ(run.status, 0) << run.err;
  const nlohmann::json document = nlohmann::json::parse(run.out);
  const nlohmann::json& devices = document.at("devices");
  ASSERT_GE(devices.size(), 4u);
  EXPECT_EQ(devices[0].at("name"), "cpu");
  EXPECT_EQ(devices[0].at("hardware"), "host");
  EXPECT_GT(devices[0].at("limit_bytes").get<std::uint64_t>(), 0u);

  bool saw_first = false;
  bool saw_second = false;
  for (const nlohmann::json& device : devices) {
    if (device.at("name") == "sim:8GiB/0") {
      saw_first = true;
      EXPECT_EQ(device.at("limit_bytes").get<std::uint64_t>(), std::uint64_t{3} << 30);
      EXPECT_EQ(device.at("total_bytes").get<std::uint64_t>(), std::uint64_t{8} << 30);
      EXPECT_EQ(device.at("policy").at("growth"), "on_demand");
    }
    if (device.at("name") == "sim:8GiB/1") {
      saw_second = true;
      EXPECT_EQ(device.at("limit_bytes").get<std::uint64_t>(), std::uint64_t{2} << 30);
    }
  }
  EXPECT_TRUE(saw_first && saw_second) << run.out;

  const nlohmann::json& visibility = document.at("visibility");
  ASSERT_GE(visibility.size(), 2u);
  EXPECT_THAT(visibility[0].get<std::string>(), StartsWith("CUDA_VISIBLE_DEVICES is not set"));
  EXPECT_THAT(visibility[1].get<std::string>(), StartsWith("PLIMSOLL_VISIBLE_DEVICES=\"0\""));
}

TEST_F(DevicesCommand, TableHasAHeaderTheDevicesAndTheVisibilitySection) {
  const CliRun run = run_plimsoll("devices", environment());
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_THAT(run.out, StartsWith("device"));
  EXPECT_THAT(run.out, HasSubstr("sim:8GiB/1"));
  EXPECT_THAT(run.out, HasSubstr("split into 2 logical devices"));
  EXPECT_THAT(run.out, HasSubstr("\nVisibility:\n  CUDA_VISIBLE_DEVICES is not set"));
}

TEST_F(DevicesCommand, BadEnvironmentIsAnErrorNamingTheVariable) {
  const CliRun run = run_plimsoll("devices", "PLIMSOLL_MEMORY_LIMIT=lots");
  EXPECT_EQ(run.status, 2) << run.out;
  EXPECT_THAT(run.err, HasSubstr("PLIMSOLL_MEMORY_LIMIT=\"lots\""));
}

}  // namespace
