#pragma once
// What `plimsoll train` needs to run at all, for the tests that run it (a build with libtorch, and Fashion-MNIST), and
// the fixture those tests share: skipped without them, and the JSON report a run ends with.
#include <filesystem>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_runner.hpp"
#include "plimsoll/datasets.hpp"

namespace plimsoll::testing {

/// Why `plimsoll train` cannot run here (the message for GTEST_SKIP), or "" when it can.
inline std::string why_train_cannot_run() {
  const CliRun probe = run_plimsoll("train --quiet --data /nonexistent");
  if (probe.err.find("built without libtorch") != std::string::npos) {
    return "this build has no libtorch: scripts/install-deps.sh installs libtorch-dev";
  }
  if (!std::filesystem::exists(default_fashion_mnist_dir())) {
    return default_fashion_mnist_dir().string() + " is missing: apt-get install dataset-fashion-mnist";
  }
  return "";
}

/// Runs of `plimsoll train`: skipped where it cannot run (why_train_cannot_run).
class TrainRunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string missing = why_train_cannot_run();
    if (!missing.empty()) GTEST_SKIP() << missing;
  }

  /// The last line of the run's stdout (`--json`'s report), parsed; null, with a failure, when there is none.
  static nlohmann::json last_json(const CliRun& run) {
    const auto lines = lines_of(run.out);
    if (lines.empty()) {
      ADD_FAILURE() << "no output; stderr: " << run.err;
      return {};
    }
    return nlohmann::json::parse(lines.back());
  }

  /// last_json of a run that must have succeeded.
  static nlohmann::json json_of(const CliRun& run) {
    EXPECT_EQ(run.status, 0) << run.err;
    return last_json(run);
  }
};

}  // namespace plimsoll::testing
