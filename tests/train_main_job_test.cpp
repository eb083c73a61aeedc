// `plimsoll train`, the main job, run as a user runs it: short runs for each option, and the default run for the
// accuracy it promises. Skipped when the build has no libtorch or the machine has no Fashion-MNIST.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_runner.hpp"
#include "train_requirements.hpp"
#include "plimsoll/datasets.hpp"

namespace {

using plimsoll::testing::CliRun;
using plimsoll::testing::run_plimsoll;
using ::testing::HasSubstr;

// One batch of 128 images of 28x28 floats: what the leak demo keeps per step.
constexpr double kBatchImageBytes = 128.0 * 28 * 28 * sizeof(float);

class TrainCommand : public plimsoll::testing::TrainRunTest {
 protected:
  static std::string temp_path(const std::string& name) {
    return ::testing::TempDir() + "plimsoll_train_" + name;
  }
};

const nlohmann::json* find_tag(const nlohmann::json& device, const std::string& tag) {
  for (const auto& entry : device["tags"]) {
    if (entry["tag"] == tag) return &entry;
  }
  return nullptr;
}

TEST_F(TrainCommand, ShortRunEndsWithTheJsonKeysAndEveryTrainingTag) {
  const nlohmann::json report = json_of(run_plimsoll("train --epochs 1 --limit-batches 25 --json --quiet"));
  ASSERT_TRUE(report.is_object());
  EXPECT_GT(report["test_accuracy"].get<double>(), 0.5);  // 25 steps already beat chance (0.1) by far
  EXPECT_FALSE(report["leak"].get<bool>());
  EXPECT_EQ(report["steps"], 25);
  const auto peak_in_use = report["peak_in_use_bytes"].get<std::uint64_t>();
  EXPECT_GT(peak_in_use, 1u << 20);
  EXPECT_GE(report["peak_reserved_bytes"].get<std::uint64_t>(), peak_in_use);
  ASSERT_EQ(report["devices"].size(), 1u);
  const nlohmann::json& device = report["devices"][0];
  EXPECT_EQ(device["device"], "cpu");
  for (const char* tag : {"weights", "gradients", "optimizer_state", "activations", "batches"}) {
    const nlohmann::json* entry = find_tag(device, tag);
    ASSERT_NE(entry, nullptr) << tag;
    EXPECT_GT((*entry)["peak_in_use_bytes"].get<std::uint64_t>(), 0u) << tag;
  }
  // Between steps a job holds its weights, a gradient for each parameter and Adam's two moments per parameter;
  // the weights also hold batch norm's running statistics, which have no gradient.
  const auto in_use = [&](const char* tag) { return (*find_tag(device, tag))["in_use_bytes"].get<std::uint64_t>(); };
  EXPECT_EQ(in_use("optimizer_state"), 2 * in_use("gradients"));
  EXPECT_GT(in_use("weights"), in_use("gradients"));
  EXPECT_LT(in_use("weights"), in_use("gradients") + 4096);
  EXPECT_EQ((*find_tag(device, "activations"))["in_use_bytes"], 0);
  EXPECT_LE(report["loader"]["peak_bytes_held"].get<std::uint64_t>(),
            report["loader"]["byte_budget"].get<std::uint64_t>());
}

TEST_F(TrainCommand, HumanReportShowsProgressTagsAndTheLeakVerdict) {
  const CliRun run = run_plimsoll("train --epochs 1 --limit-batches 8");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_THAT(run.err, HasSubstr("epoch 1/1"));  // progress (stderr is a file here: whole lines)
  EXPECT_THAT(run.out, HasSubstr("test accuracy"));
  EXPECT_THAT(run.out, HasSubstr("optimizer_state"));
  EXPECT_THAT(run.out, HasSubstr("peak reserved"));
  EXPECT_THAT(run.out, HasSubstr("leak watch: no leak"));
}

TEST_F(TrainCommand, DefaultRunReachesEightyFivePercentTestAccuracy) {
  const nlohmann::json report = json_of(run_plimsoll("train --json --quiet"));
  ASSERT_TRUE(report.is_object());
  EXPECT_GE(report["test_accuracy"].get<double>(), 0.85);
  EXPECT_EQ(report["epochs"], 2);
  EXPECT_FALSE(report["leak"].get<bool>());
  EXPECT_EQ(report["leak_verdict"], "no_growth");
  EXPECT_FALSE(report["allocator_overridden"].get<bool>());  // nothing else installs a CPU allocator here
}

TEST_F(TrainCommand, LimitBelowWhatTheModelNeedsEndsWithTheOomReportAndExitThree) {
  const CliRun run = run_plimsoll("train --epochs 1 --limit-batches 3 --memory-limit 12MiB --json");
  EXPECT_EQ(run.status, 3);
  EXPECT_THAT(run.err, HasSubstr("out of memory on cpu"));
  EXPECT_THAT(run.err, HasSubstr("suggestion:"));
  const nlohmann::json report = nlohmann::json::parse(plimsoll::testing::lines_of(run.out).back());
  EXPECT_TRUE(report["oom"].get<bool>());
  EXPECT_THAT(report["error"].get<std::string>(), HasSubstr("limit:"));
}

TEST_F(TrainCommand, TwoLogicalDevicesTrainDataParallelEachWithinItsLimit) {
  const nlohmann::json report =
      json_of(run_plimsoll("train --devices 2 --memory-limit 48MiB --epochs 1 --limit-batches 20 --json --quiet"));
  ASSERT_EQ(report["devices"].size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    const nlohmann::json& device = report["devices"][i];
    EXPECT_EQ(device["device"], "cpu/" + std::to_string(i));
    EXPECT_EQ(device["limit_bytes"], 48u << 20);
    EXPECT_LE(device["peak_reserved_bytes"].get<std::uint64_t>(), 48u << 20);
    // A whole replica on each: weights and optimizer state on both devices.
    ASSERT_NE(find_tag(device, "weights"), nullptr);
    ASSERT_NE(find_tag(device, "optimizer_state"), nullptr);
    // Each replica copies in half of each 128-sample batch.
    EXPECT_EQ((*find_tag(device, "batches"))["peak_in_use_bytes"].get<std::uint64_t>() % 256, 0u);
  }
  EXPECT_GT(report["test_accuracy"].get<double>(), 0.5);
}

TEST_F(TrainCommand, LeakDemoIsFoundWithTheBatchFeedAndOneBatchPerStep) {
  const nlohmann::json report = json_of(run_plimsoll("train --leak-demo --json --quiet"));
  EXPECT_TRUE(report["leak"].get<bool>());
  EXPECT_NEAR(report["leak_bytes_per_step"].get<double>(), kBatchImageBytes, 0.05 * kBatchImageBytes);
  ASSERT_FALSE(report["leak_groups"].empty());
  EXPECT_THAT(report["leak_groups"][0]["where"].get<std::string>(), HasSubstr("BatchFeed::tensors"));
  EXPECT_EQ(report["leak_groups"][0]["tag"], "batches");
}

TEST_F(TrainCommand, RecordAndHtmlKeepTheTraceAndTheTimeline) {
  const std::string trace = temp_path("run.plimsoll");
  const std::string html = temp_path("run.html");
  std::filesystem::remove(trace);
  std::filesystem::remove(html);
  const nlohmann::json report = json_of(
      run_plimsoll("train --epochs 1 --limit-batches 10 --json --quiet --record " + trace + " --html " + html));
  EXPECT_EQ(report["trace"], trace);
  // The trace is the run's: `plimsoll leaks` reads the same ten steps and the same verdict.
  const nlohmann::json leaks = json_of(run_plimsoll("leaks --json " + trace));
  EXPECT_EQ(leaks["steps"], 10);
  EXPECT_EQ(leaks["verdict"], report["leak_verdict"]);
  // The job marker `plimsoll plan` reads the batch size from (docs/plan.md).
  const nlohmann::json plan = json_of(run_plimsoll("plan --json " + trace));
  EXPECT_EQ(plan["batch"], 128);
  EXPECT_EQ(plan["model"]["job"], "fashion_cnn");
  const std::string page = plimsoll::testing::read_text_file(html);
  EXPECT_THAT(page, HasSubstr("<svg"));
  EXPECT_THAT(page, HasSubstr("activations"));
}

TEST_F(TrainCommand, BadOptionsNameTheProblemAndTheFix) {
  struct Case {
    const char* args;
    const char* message;
  };
  for (const Case& c : {Case{"--devices 0", "--devices 0 is too small; give --devices a whole number of at least 1"},
                        Case{"--devices 17", "--devices 17: give 1 to 16"},
                        Case{"--device cuda:0", "needs a host device"},
                        Case{"--device sim:1GiB", "needs a host device"},
                        Case{"--memory-limit lots", "lots"},
                        Case{"--data /nonexistent/fashion", "Fashion-MNIST is not in /nonexistent/fashion"},
                        Case{"--devices 4 --batch-size 2", "raise --batch-size or lower --devices"},
                        Case{"--lr -1", "--lr must be a positive number"},
                        Case{"--record /nonexistent/dir/run.plimsoll", "--record"}}) {
    const CliRun run = run_plimsoll(std::string("train --quiet --limit-batches 1 ") + c.args);
    EXPECT_EQ(run.status, 2) << c.args << ": " << run.err;
    EXPECT_THAT(run.err, HasSubstr(c.message)) << c.args;
  }
}

}  // namespace
