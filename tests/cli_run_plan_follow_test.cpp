// plimsoll replay --run-plan: a run plan followed from the trace's first allocation (src/engine/run_plan_follower.hpp),
// reported in the JSON line and under the table; a plan for another limit ignored with a line on stderr; a missing or
// malformed plan an error naming the file.
#include <cstdint>
#include <fstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_runner.hpp"
#include "engine/heap.hpp"
#include "engine/run_plan.hpp"

namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using plimsoll::testing::CliRun;
using plimsoll::testing::lines_of;

constexpr std::uint64_t MiB = 1ull << 20;
constexpr std::uint64_t kLimit = 64 * MiB;  // --memory-limit 64MiB

std::string temp_path(const std::string& name) {
  const ::testing::TestInfo& test = *::testing::UnitTest::GetInstance()->current_test_info();
  return ::testing::TempDir() + "cli_run_plan_follow_" + test.name() + "_" + name;
}

// Three steps; the plan places the requests through step 1 (the first four), spread out, and step 2 is best fit's.
std::string write_trace() {
  const std::string path = temp_path("two_steps.trace");
  std::ofstream(path) << "a 1 4096\n# model test\n"
                         "# step 0 begin\na 2 2097152\na 3 65536\nf 2\n# step 0 end\n"
                         "# step 1 begin\na 4 3145728\nf 3\nf 4\n# step 1 end\n"
                         "# step 2 begin\na 5 2097152\nf 5\n# step 2 end\nf 1\n";
  return path;
}

plimsoll::engine::RunPlan test_plan(std::uint64_t limit) {
  plimsoll::engine::RunPlan plan;
  plan.limit = limit;
  plan.through_step = 1;
  plan.source = "two_steps.trace";
  const std::uint64_t sizes[] = {4096, 2 * MiB, 65536, 3 * MiB};
  const std::uint64_t offsets[] = {0, 2 * MiB, 16 * MiB, 8 * MiB};
  for (int i = 0; i < 4; ++i) {
    plan.entries.push_back({plimsoll::engine::Heap::round(sizes[i]), offsets[i]});
    plan.fingerprint.push_back(plimsoll::engine::Heap::round(sizes[i]));
  }
  plan.covered_granules = plimsoll::engine::count_covered_granules(plan.entries, plan.granule);
  return plan;
}

std::string write_plan(std::uint64_t limit) {
  const std::string path = temp_path("test.plan");
  plimsoll::engine::write_run_plan(test_plan(limit), path);
  return path;
}

CliRun replay(const std::string& trace, const std::string& extra) {
  return plimsoll::testing::run_plimsoll("replay " + trace + " --device sim:4GiB --policy on_demand --memory-limit 64MiB " +
                                         extra);
}

TEST(CliRunPlanFollow, TheJsonLineCountsWhatThePlanPlacedAndWhyItEnded) {
  const CliRun run = replay(write_trace(), "--run-plan " + write_plan(kLimit) + " --json");
  ASSERT_EQ(run.status, 0) << run.err;
  const nlohmann::json row = nlohmann::json::parse(lines_of(run.out).at(0));
  const nlohmann::json& plan = row["run_plan"];
  EXPECT_EQ(plan["loaded"], true);
  EXPECT_EQ(plan["entries"], 4);
  EXPECT_EQ(plan["placed"], 4);
  EXPECT_EQ(plan["ended_at"], 4);
  EXPECT_EQ(plan["ended_by"], "finished");  // at the boundary closing step 1, its last
  // Mapped exactly the plan's granules: 0 (the 4 KiB block), 1, 4-5 and 8 (2, 3 MiB and 64 KiB blocks).
  EXPECT_EQ(row["peak_reserved_bytes"], 5 * 2 * MiB);
  // Mapped when the plan was loaded, before the first event, in three runs (0-1, 4-5, 8): counted in `maps`, and
  // nothing after (step 2's block fits the freed granules).
  EXPECT_EQ(row["maps"], 3);
  EXPECT_EQ(row["oom"], false);
}

TEST(CliRunPlanFollow, TheTableSaysWhereThePlanEnded) {
  const CliRun run = replay(write_trace(), "--run-plan " + write_plan(kLimit));
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("run plan (requests placed at their planned address"));
  EXPECT_THAT(run.out, HasSubstr("two_steps.trace (on_demand): placed 4 of the plan's 4 requests"));
}

TEST(CliRunPlanFollow, APlanForAHigherLimitIsIgnoredWithALineOnStderr) {
  const CliRun run = replay(write_trace(), "--run-plan " + write_plan(kLimit + 2 * MiB) + " --json");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_THAT(run.err, HasSubstr("run plan ignored"));
  EXPECT_THAT(run.err, HasSubstr("limit"));
  const nlohmann::json row = nlohmann::json::parse(lines_of(run.out).at(0));
  EXPECT_EQ(row["run_plan"]["loaded"], false);
  EXPECT_EQ(row["oom"], false);
}

TEST(CliRunPlanFollow, AMissingOrMalformedPlanIsAnErrorNamingTheFile) {
  const std::string trace = write_trace();
  const CliRun missing = replay(trace, "--run-plan /nonexistent/job.plan --json");
  EXPECT_NE(missing.status, 0);
  EXPECT_THAT(missing.err, HasSubstr("/nonexistent/job.plan"));
  const std::string garbage = temp_path("garbage.plan");
  std::ofstream(garbage) << "not a plan\n";
  const CliRun malformed = replay(trace, "--run-plan " + garbage + " --json");
  EXPECT_NE(malformed.status, 0);
  EXPECT_THAT(malformed.err, HasSubstr(garbage));
  EXPECT_THAT(malformed.err, Not(HasSubstr("terminate")));
}

// End to end on a shared trace: the clean batch-16 ResNet-18 trace at peak live + 4 MiB runs out of memory in step 1
// with best fit and step plans (event 15,659; step 1 ends at event 19,450). With a run plan packed through step 1
// (`plimsoll run-plan --through-step 1`: 95 granules, the limit's), steps 0 and 1 are placed whole, mapped when the
// plan is loaded, with no map or unmap in step 1; what comes after is the step plans' (they run out in step 2).
TEST(CliRunPlanFollow, TheCleanBatch16TraceLastsThroughStep1WithItsPlanAndNotWithout) {
  const std::string trace = std::string(PLIMSOLL_TRACES_DIR) + "/leak-clean-resnet18.trace";
  const std::string plan = temp_path("clean_s1.plan");
  const CliRun packed = plimsoll::testing::run_plimsoll("run-plan " + trace + " --through-step 1 -o " + plan);
  ASSERT_EQ(packed.status, 0) << packed.err;
  const std::string replay_args = "replay " + trace + " --device sim:64GiB --policy on_demand --limit-plus-mib 4 --json";
  const CliRun with = plimsoll::testing::run_plimsoll(replay_args + " --run-plan " + plan);
  const CliRun without = plimsoll::testing::run_plimsoll(replay_args);
  ASSERT_EQ(with.status, 0) << with.err;
  ASSERT_EQ(without.status, 0) << without.err;
  const nlohmann::json planned = nlohmann::json::parse(lines_of(with.out).at(0));
  const nlohmann::json bare = nlohmann::json::parse(lines_of(without.out).at(0));
  constexpr std::size_t kStep1End = 19450;
  ASSERT_EQ(bare["oom"], true);
  EXPECT_LT(bare["oom_event"].get<std::size_t>(), kStep1End);
  EXPECT_EQ(planned["run_plan"]["placed"], 9953);
  EXPECT_EQ(planned["run_plan"]["ended_by"], "finished");
  EXPECT_EQ(planned["run_plan"]["mapped_ahead"], 95 * 2 * MiB);
  if (planned["oom"] == true) {
    EXPECT_GT(planned["oom_event"].get<std::size_t>(), kStep1End);
  }
  ASSERT_GE(planned["maps_by_step"].size(), 2u);
  EXPECT_EQ(planned["maps_by_step"][1], 0);
  EXPECT_EQ(planned["unmaps_by_step"][1], 0);
}

}  // namespace
