// `plimsoll train --model-parallel 2`, run as a user runs it: the network split into two stages on cpu/0 and cpu/1,
// micro-batches pipelined between them. With one micro-batch it trains exactly as one device does; with the default
// four it stays within a few points of it; each device's memory by tag shows its own stage's tensors; bad options
// and an out-of-memory end the run with a clear message. Skipped without libtorch or Fashion-MNIST.
#include <cmath>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_runner.hpp"
#include "train_requirements.hpp"

namespace {

using plimsoll::testing::CliRun;
using plimsoll::testing::run_plimsoll;
using ::testing::HasSubstr;

// FashionCnn's parameters by stage (src/train/model.hpp): the first conv block; the second and the linear layers.
constexpr std::uint64_t kFirstStageParameters = 16 * 9 + 2 * 16;
constexpr std::uint64_t kSecondStageParameters = 32 * 16 * 9 + 2 * 32 + 1568 * 128 + 128 + 128 * 10 + 10;

class TrainModelParallel : public plimsoll::testing::TrainRunTest {};

std::uint64_t tag_bytes(const nlohmann::json& device, const std::string& tag, const char* key = "in_use_bytes") {
  for (const auto& entry : device["tags"]) {
    if (entry["tag"] == tag) return entry[key].get<std::uint64_t>();
  }
  ADD_FAILURE() << "no tag " << tag << " on " << device["device"];
  return 0;
}

TEST_F(TrainModelParallel, OneMicroBatchTrainsExactlyAsOneDevice) {
  const std::string run = "train --epochs 1 --limit-batches 20 --json --quiet";
  const nlohmann::json one = json_of(run_plimsoll(run));
  const nlohmann::json split = json_of(run_plimsoll(run + " --model-parallel 2 --micro-batches 1"));
  ASSERT_EQ(split["devices"].size(), 2u);
  // The same initial weights, the same arithmetic split at the stages' boundary: the same numbers.
  EXPECT_DOUBLE_EQ(split["test_accuracy"].get<double>(), one["test_accuracy"].get<double>());
  EXPECT_DOUBLE_EQ(split["epoch_results"][0]["train_loss"].get<double>(),
                   one["epoch_results"][0]["train_loss"].get<double>());
  EXPECT_DOUBLE_EQ(split["epoch_results"][0]["test_loss"].get<double>(),
                   one["epoch_results"][0]["test_loss"].get<double>());
}

TEST_F(TrainModelParallel, EachDeviceHoldsItsOwnStageAndTheAccuracyStaysWithinTwoPointsOfOneDevice) {
  const std::string run = "train --epochs 1 --limit-batches 60 --json --quiet";
  const nlohmann::json one = json_of(run_plimsoll(run));
  const nlohmann::json split = json_of(run_plimsoll(run + " --model-parallel 2"));
  // Batch norm sees micro-batches of 32 instead of batches of 128: close, not equal.
  EXPECT_NEAR(split["test_accuracy"].get<double>(), one["test_accuracy"].get<double>(), 0.02);
  EXPECT_GT(split["test_accuracy"].get<double>(), 0.7);
  EXPECT_EQ(split["model_parallel"]["stages"], 2);
  EXPECT_EQ(split["model_parallel"]["micro_batches"], 4);
  ASSERT_EQ(split["model_parallel"]["stage_busy_seconds"].size(), 2u);
  EXPECT_EQ(split["parameters"], one["parameters"]);

  ASSERT_EQ(split["devices"].size(), 2u);
  const nlohmann::json& first = split["devices"][0];
  const nlohmann::json& second = split["devices"][1];
  EXPECT_EQ(first["device"], "cpu/0");
  EXPECT_EQ(second["device"], "cpu/1");
  // Weights: the first conv block on cpu/0, the rest on cpu/1 (in-use bytes round each tensor up to 256).
  EXPECT_GE(tag_bytes(first, "weights"), kFirstStageParameters * 4);
  EXPECT_LT(tag_bytes(first, "weights"), 4u << 10);
  EXPECT_GE(tag_bytes(second, "weights"), kSecondStageParameters * 4);
  EXPECT_LT(tag_bytes(second, "weights"), kSecondStageParameters * 4 + 12 * 256);
  for (const nlohmann::json* device : {&first, &second}) {
    // Each stage's gradients and Adam's two moments on its own device; activations and batches freed each step.
    EXPECT_GT(tag_bytes(*device, "gradients"), 0u);
    EXPECT_EQ(tag_bytes(*device, "optimizer_state"), 2 * tag_bytes(*device, "gradients")) << (*device)["device"];
    EXPECT_EQ(tag_bytes(*device, "activations"), 0u);
    EXPECT_GT(tag_bytes(*device, "activations", "peak_in_use_bytes"), 0u);
    EXPECT_GT(tag_bytes(*device, "batches", "peak_in_use_bytes"), 0u);  // images on cpu/0, labels on cpu/1
    EXPECT_LE((*device)["peak_in_use_bytes"].get<std::uint64_t>(), (*device)["limit_bytes"].get<std::uint64_t>());
  }
  // The first block's activations (16 x 28 x 28 per image, before pooling) are the largest: the larger peak is stage 0's.
  EXPECT_GT(first["peak_in_use_bytes"].get<std::uint64_t>(), second["peak_in_use_bytes"].get<std::uint64_t>());
  EXPECT_FALSE(split["leak"].get<bool>());
}

TEST_F(TrainModelParallel, DefaultEpochsReachEightyFivePercent) {
  const nlohmann::json report = json_of(run_plimsoll("train --model-parallel 2 --json --quiet"));
  EXPECT_GE(report["test_accuracy"].get<double>(), 0.85);
}

TEST_F(TrainModelParallel, HumanReportShowsBothDevicesByTagAndTheStages) {
  const CliRun run = run_plimsoll("train --epochs 1 --limit-batches 5 --model-parallel 2 --micro-batches 2");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("cpu/0   weights"));
  EXPECT_THAT(run.out, HasSubstr("cpu/1   weights"));
  EXPECT_THAT(run.out, HasSubstr("model parallel: 2 stages"));
  EXPECT_THAT(run.out, HasSubstr("2 micro-batches per step"));
  EXPECT_THAT(run.err, HasSubstr("the model split in 2 stages pipelining 2 micro-batches"));
}

TEST_F(TrainModelParallel, OutOfMemoryOnAStageEndsTheRunWithThatDevicesReport) {
  const CliRun run = run_plimsoll("train --quiet --epochs 1 --limit-batches 5 --model-parallel 2 --memory-limit 12MiB "
                                  "--json");
  EXPECT_EQ(run.status, 3) << run.err;
  EXPECT_THAT(run.err, HasSubstr("plimsoll: out of memory on cpu/0"));  // the first conv block's activations
  EXPECT_THAT(run.out, HasSubstr("\"oom\":true"));
}

TEST_F(TrainModelParallel, BadOptionsNameTheProblemAndTheFix) {
  const struct {
    const char* options;
    const char* message;
  } cases[] = {
      {"--model-parallel 3", "the network splits into 2 stages"},
      {"--model-parallel 0", "give --model-parallel 2, or 1 for no split"},
      {"--model-parallel 2 --devices 2", "data and model parallelism together are not supported"},
      {"--model-parallel 2 --nproc 2", "model parallelism runs in one process; drop --nproc"},
      {"--micro-batches 4", "--micro-batches 4 without --model-parallel"},
      {"--model-parallel 2 --micro-batches 0", "--micro-batches 0: give at least 1"},
      {"--model-parallel 2 --micro-batches 200", "give at most 128 micro-batches or raise --batch-size"},
      {"--model-parallel 2 --device cpu/1", "give --device cpu"},
  };
  for (const auto& c : cases) {
    const CliRun run = run_plimsoll(std::string("train --quiet --epochs 1 --limit-batches 1 ") + c.options);
    EXPECT_EQ(run.status, 2) << c.options << ": " << run.err;
    EXPECT_THAT(run.err, HasSubstr(c.message)) << c.options;
  }
}

}  // namespace
