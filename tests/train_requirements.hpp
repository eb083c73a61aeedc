#pragma once
// What `plimsoll train` needs to run at all, for the tests that run it: a build with libtorch, and Fashion-MNIST.
#include <filesystem>
#include <string>

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

}  // namespace plimsoll::testing
