// `plimsoll leaks` as a user runs it: the built binary on the real pair of leak traces, its JSON and its report,
// and the errors for files it cannot use.
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_runner.hpp"

namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

using plimsoll::testing::CliRun;

constexpr double kBatchBytes = 16.0 * 96 * 96 * 3 * 4;  // one batch of the leaking run, float32

CliRun plimsoll(const std::string& args) { return plimsoll::testing::run_plimsoll(args); }

std::string trace_path(const std::string& file) { return std::string(PLIMSOLL_TRACES_DIR) + "/" + file; }

std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

using plimsoll::testing::lines_of;

std::set<std::string> keys_of(const nlohmann::json& object) {
  std::set<std::string> keys;
  for (const auto& item : object.items()) keys.insert(item.key());
  return keys;
}

const std::set<std::string> kJsonKeys = {"trace",          "leak",           "verdict",
                                         "steps",          "steps_from",     "bytes_per_step",
                                         "allocations_per_step",
                                         "growth_every_steps", "growth_steps", "steps_since_growth",
                                         "first_growth_step", "last_growth_step", "retained_bytes",
                                         "retained_allocations", "warmup_bytes", "groups"};
const std::set<std::string> kGroupKeys = {"bytes", "allocations", "smallest", "largest", "tag", "site",
                                          "position", "between_steps", "where", "first_step", "last_step"};

TEST(CliLeaks, JsonOnTheRetainedBatchesTraceIsOneObjectSayingLeakAtOneBatchPerStep) {
  const std::string path = trace_path("leak-retained-batches-resnet18.trace");
  const CliRun run = plimsoll("leaks " + path + " --json");
  ASSERT_EQ(run.status, 0) << run.err;
  ASSERT_EQ(lines_of(run.out).size(), 1u) << run.out;
  const nlohmann::json report = nlohmann::json::parse(run.out);
  EXPECT_EQ(keys_of(report), kJsonKeys);
  EXPECT_EQ(report["trace"], path);
  EXPECT_EQ(report["leak"], true);
  EXPECT_EQ(report["verdict"], "leak");
  EXPECT_EQ(report["steps"], 12);
  EXPECT_NEAR(report["bytes_per_step"].get<double>(), kBatchBytes, 0.05 * kBatchBytes);
  EXPECT_DOUBLE_EQ(report["allocations_per_step"].get<double>(), 1.0);
  EXPECT_EQ(report["first_growth_step"], 1);
  EXPECT_EQ(report["last_growth_step"], 10);
  EXPECT_EQ(report["retained_allocations"], 10);
  ASSERT_EQ(report["groups"].size(), 1u);
  const nlohmann::json& group = report["groups"][0];
  EXPECT_EQ(keys_of(group), kGroupKeys);
  EXPECT_EQ(group["allocations"], 10);
  EXPECT_EQ(group["smallest"], 1769472);
  EXPECT_EQ(group["site"], "");  // the text format has no call sites: the position in the step says where
  EXPECT_EQ(group["position"], 4);
  EXPECT_EQ(group["where"], "allocation #4 of the step");
  EXPECT_EQ(group["first_step"], 1);
  EXPECT_EQ(group["last_step"], 10);
}

TEST(CliLeaks, JsonOnTheCleanTwinSaysNoLeak) {
  const CliRun run = plimsoll("leaks " + trace_path("leak-clean-resnet18.trace") + " --json");
  ASSERT_EQ(run.status, 0) << run.err;
  const nlohmann::json report = nlohmann::json::parse(run.out);
  EXPECT_EQ(keys_of(report), kJsonKeys);
  EXPECT_EQ(report["leak"], false);
  EXPECT_EQ(report["verdict"], "no_growth");
  EXPECT_EQ(report["bytes_per_step"], 0);
  EXPECT_EQ(report["allocations_per_step"], 0);
  EXPECT_TRUE(report["first_growth_step"].is_null());
  EXPECT_TRUE(report["groups"].empty());
}

TEST(CliLeaks, ReportGivesTheVerdictFirstThenTheGroups) {
  const CliRun run = plimsoll("leaks " + trace_path("leak-retained-batches-resnet18.trace"));
  ASSERT_EQ(run.status, 0) << run.err;
  const std::vector<std::string> lines = lines_of(run.out);
  ASSERT_GE(lines.size(), 6u) << run.out;
  EXPECT_THAT(lines[0], StartsWith("LEAK: memory kept past its step grows by 1.69 MiB per step (1.0 allocations "
                                   "per step, every step), made in steps 1 to 10 (12 steps seen)"));
  EXPECT_THAT(lines[1], HasSubstr("16.88 MiB in 10 allocations"));
  EXPECT_THAT(run.out, HasSubstr("bytes  allocations     sizes  tag  made at"));
  EXPECT_THAT(lines.back(), HasSubstr("16.88 MiB           10  1.69 MiB  -    allocation #4 of the step  1-10"));
}

TEST(CliLeaks, ReportOnTheCleanTwinAndOnShortTracesSaysNoLeak) {
  const CliRun clean = plimsoll("leaks " + trace_path("leak-clean-resnet18.trace"));
  ASSERT_EQ(clean.status, 0) << clean.err;
  EXPECT_THAT(clean.out, StartsWith("no leak: nothing made after the first step outlived the step after it; 12 "
                                    "steps\n"));
  EXPECT_THAT(clean.out, Not(HasSubstr("made at")));

  const CliRun short_run = plimsoll("leaks " + trace_path("resnet50-b32.trace"));
  ASSERT_EQ(short_run.status, 0) << short_run.err;
  EXPECT_THAT(short_run.out, StartsWith("no verdict: 3 steps; more than 3 are needed"));

  const CliRun no_steps = plimsoll("leaks " + write_temp("leaks_no_steps.trace", "a 1 100\na 2 50\nf 1\n"));
  ASSERT_EQ(no_steps.status, 0) << no_steps.err;
  EXPECT_THAT(no_steps.out, StartsWith("no verdict: the trace has no 'step N begin' / 'step N end' markers"));
}

// The same pair with its step markers stripped: steps come from the repeating pattern, the verdict is the same.
std::string stripped_copy(const std::string& file) {
  std::ifstream in(trace_path(file));
  std::string text;
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# step ", 0) != 0) text += line + "\n";
  }
  return write_temp("stripped_" + file, text);
}

TEST(CliLeaks, TracesWithoutMarkersGetDetectedStepsAndTheSameVerdict) {
  const CliRun leaking = plimsoll("leaks " + stripped_copy("leak-retained-batches-resnet18.trace"));
  ASSERT_EQ(leaking.status, 0) << leaking.err;
  const std::vector<std::string> lines = lines_of(leaking.out);
  ASSERT_GE(lines.size(), 2u) << leaking.out;
  EXPECT_THAT(lines[0], StartsWith("LEAK: memory kept past its step grows by 1.69 MiB per step (1.0 allocations "
                                   "per step, every step), made in steps 1 to 10 (12 steps seen)"));
  EXPECT_THAT(lines[1], StartsWith("steps: 12 steps detected from the repeating allocation pattern (no step "
                                   "markers): 9457 allocations and frees per step"));

  const CliRun clean = plimsoll("leaks --json " + stripped_copy("leak-clean-resnet18.trace"));
  ASSERT_EQ(clean.status, 0) << clean.err;
  const nlohmann::json report = nlohmann::json::parse(clean.out);
  EXPECT_EQ(report["verdict"], "no_growth");
  EXPECT_EQ(report["steps"], 12);
  EXPECT_EQ(report["steps_from"], "detected");
  EXPECT_EQ(report["step_detection"]["period_events"], 9458);
  EXPECT_GT(report["step_detection"]["repeating_fraction"].get<double>(), 0.99);

  const CliRun no_steps = plimsoll("leaks " + write_temp("leaks_no_pattern.trace", "a 1 100\na 2 50\nf 1\n"));
  ASSERT_EQ(no_steps.status, 0) << no_steps.err;
  const std::vector<std::string> no_step_lines = lines_of(no_steps.out);
  ASSERT_EQ(no_step_lines.size(), 2u) << no_steps.out;
  EXPECT_THAT(no_step_lines[1], StartsWith("steps: no steps: the trace has no step markers and no allocation "
                                           "pattern of 8 or more events repeats"));
}

TEST(CliLeaks, MissingFileExitsTwoNamingIt) {
  const CliRun run = plimsoll("leaks /nonexistent/run.trace --json");
  EXPECT_EQ(run.status, 2);
  EXPECT_EQ(run.out, "");
  EXPECT_THAT(run.err, StartsWith("plimsoll: error: /nonexistent/run.trace: cannot open the trace"));
}

TEST(CliLeaks, MalformedTraceExitsTwoNamingTheLine) {
  const std::string path = write_temp("leaks_malformed.trace", "# step 0 begin\na 1 100\nbogus\n# step 0 end\n");
  const CliRun run = plimsoll("leaks " + path);
  EXPECT_EQ(run.status, 2);
  EXPECT_THAT(run.err, StartsWith("plimsoll: error: " + path + ":3: unknown event 'bogus'"));

  const std::string unpaired = write_temp("leaks_unpaired.trace", "# step 0 end\n");
  const CliRun unpaired_run = plimsoll("leaks " + unpaired);
  EXPECT_EQ(unpaired_run.status, 2);
  EXPECT_THAT(unpaired_run.err, HasSubstr("'step 0 end' without a matching 'step 0 begin'"));
}

}  // namespace
