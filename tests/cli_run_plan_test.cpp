// `plimsoll run-plan` as a user runs it: a small constructed trace packed, the plan file read back and checked
// (every request planned, no two requests live together sharing a byte, the granules the command printed), the JSON
// keys (docs/run-plans.md), and each refusal: a limit no plan fits, a packing over the limit (written only with
// --force), a missing or malformed trace, a step past the end, a bad option, an output folder that does not exist.
#include <cstdint>
#include <filesystem>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_runner.hpp"
#include "engine/run_packing.hpp"
#include "engine/run_plan.hpp"
#include "plan_fixtures.hpp"
#include "plimsoll/trace.hpp"
#include "run_packing_checks.hpp"

namespace {

using ::testing::HasSubstr;
using plimsoll::testing::CliRun;
using plimsoll::testing::write_temp;

constexpr std::uint64_t kMiB = 1ull << 20;

CliRun run_plan(const std::string& args) { return plimsoll::testing::run_plimsoll("run-plan " + args); }

// Three steps; step 0 holds a 1 MiB block that lives to the end (a weight), each step up to 3 MiB of activations
// freed within it: peak live 4 MiB (the target's limit: + 4 MiB, 4 granules; the lower bound 2).
const char* const kTrace =
    "# step 0 begin\na 1 1048576\na 2 1048576\na 3 2097152\nf 2\nf 3\n# step 0 end\n"
    "# step 1 begin\na 4 1048576\nf 4\na 5 3145728\nf 5\n# step 1 end\n"
    "# step 2 begin\na 6 2097152\na 7 1048576\nf 6\nf 7\n# step 2 end\nf 1\n";

// The trace the engine's packing test builds by hand (RunPacking.TheSearchBeatsEveryGreedyPacking): every greedy
// packing needs 4 granules, the most live at once is 3, the search reaches 3.
const char* const kNeedsTheSearch =
    "a 1 2883584\na 2 3145728\nf 1\na 3 1572864\na 4 1572864\nf 4\nf 2\na 5 786432\na 6 2883584\n"
    "a 7 1048576\nf 5\nf 6\na 8 1048576\nf 7\na 9 1835008\na 10 786432\nf 3\nf 10\nf 9\na 11 524288\n"
    "f 11\nf 8\n";

// A path in the temp dir, named by the test, with nothing there: a plan an earlier run left must not pass for one
// this run wrote.
std::string temp_path(const std::string& name) {
  const std::string path =
      ::testing::TempDir() + ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" + name;
  std::filesystem::remove(path);
  return path;
}

// The plan as the packer's StepPlan again (addresses from kRunBase), to check it against the trace's lifetimes.
plimsoll::engine::StepPlan as_step_plan(const plimsoll::engine::RunPlan& plan) {
  plimsoll::engine::StepPlan step;
  for (const auto& e : plan.entries) step.entries.push_back({e.size, plimsoll::engine::kRunBase + e.offset});
  return step;
}

TEST(CliRunPlan, PacksATraceAndTheFileReadsBackValid) {
  const std::string trace_path = write_temp("t.trace", kTrace);
  const std::string plan_path = temp_path("t.plan");
  for (const std::string through : {"", "--through-step 0", "--through-step 1"}) {
    SCOPED_TRACE(through);
    std::filesystem::remove(plan_path);
    const CliRun run = run_plan(trace_path + " -o " + plan_path + " --json " + through);
    ASSERT_EQ(run.status, 0) << run.err;
    const nlohmann::json out = nlohmann::json::parse(run.out);
    const plimsoll::engine::RunPlan plan = plimsoll::engine::read_run_plan(plan_path);
    const plimsoll::Trace trace = plimsoll::read_trace(trace_path);
    const std::size_t end = out["events"].get<std::size_t>();
    const plimsoll::engine::StepObservation run_observed = plimsoll::engine::observe_run(trace, end);
    EXPECT_EQ(plan.entries.size(), run_observed.requests.size());
    EXPECT_EQ(out["requests"], plan.entries.size());
    plimsoll::testing::expect_valid(run_observed, as_step_plan(plan));
    EXPECT_EQ(out["granules"], plan.covered_granules);
    EXPECT_EQ(plan.limit, 8 * kMiB);  // the target's rule under 1 GiB live: peak live (4 MiB) + 4 MiB
    EXPECT_EQ(out["limit_granules"], 4);
    EXPECT_EQ(out["fits"], true);
    EXPECT_EQ(plan.source, trace_path);
    EXPECT_EQ(plan.granule, 2 * kMiB);
    EXPECT_EQ(plan.fingerprint.size(), plan.entries.size());  // fewer than 64 requests: all of them
    for (const char* key : {"trace", "plan", "through_step", "events", "requests", "peak_live_bytes", "limit_bytes",
                            "limit_granules", "max_load_bytes", "lower_bound_granules", "greedy_granules",
                            "greedy_packing", "granules", "footprint_bytes", "fits", "seconds", "search_seconds"}) {
      EXPECT_TRUE(out.contains(key)) << key;
    }
  }
  // Through step 0: 3 requests, through_step 0; whole: 7 requests, through the last step (2).
  ASSERT_EQ(run_plan(trace_path + " -o " + plan_path + " --through-step 0").status, 0);
  EXPECT_EQ(plimsoll::engine::read_run_plan(plan_path).entries.size(), 3u);
  EXPECT_EQ(plimsoll::engine::read_run_plan(plan_path).through_step, 0u);
  ASSERT_EQ(run_plan(trace_path + " -o " + plan_path).status, 0);
  EXPECT_EQ(plimsoll::engine::read_run_plan(plan_path).entries.size(), 7u);
  EXPECT_EQ(plimsoll::engine::read_run_plan(plan_path).through_step, 2u);
}

TEST(CliRunPlan, TheTextSaysWhatItPacked) {
  const std::string trace_path = write_temp("t.trace", kTrace);
  const std::string plan_path = temp_path("t.plan");
  const CliRun run = run_plan(trace_path + " -o " + plan_path + " --limit-plus-mib 2");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("7 requests"));
  EXPECT_THAT(run.out, HasSubstr("limit        6.00 MiB (3 granules of 2 MiB; peak live 4.00 MiB)"));
  EXPECT_THAT(run.out, HasSubstr("lower bound  2 granules"));
  EXPECT_THAT(run.out, HasSubstr("fits the limit"));
  EXPECT_THAT(run.out, HasSubstr("written: " + plan_path));
  EXPECT_THAT(run.err, HasSubstr("run-plan: packing 1 of 14"));  // progress on stderr
}

TEST(CliRunPlan, ALimitBelowWhatIsLiveIsRefusedBeforePacking) {
  const std::string trace_path = write_temp("t.trace", kTrace);
  const std::string plan_path = temp_path("t.plan");
  const CliRun run = run_plan(trace_path + " -o " + plan_path + " --limit-over-live 0.5");
  EXPECT_EQ(run.status, 2);
  EXPECT_THAT(run.err, HasSubstr("no plan can fit it"));
  EXPECT_THAT(run.err, HasSubstr(trace_path));
  EXPECT_THAT(run.err, HasSubstr("--force"));
  EXPECT_THAT(run.err, ::testing::Not(HasSubstr("packing 1 of")));
  EXPECT_FALSE(std::filesystem::exists(plan_path));
}

// Greedy packing alone (--search-work 0) needs 4 granules where the limit holds 3: refused, nothing written; with
// --force written, with a warning; with the search it fits.
TEST(CliRunPlan, APackingOverTheLimitIsWrittenOnlyWithForce) {
  const std::string trace_path = write_temp("t.trace", kNeedsTheSearch);
  const std::string plan_path = temp_path("t.plan");
  const std::string limit = " --limit-plus-mib 0.75";  // over 5.25 MiB live: 6 MiB, 3 granules
  CliRun run = run_plan(trace_path + " -o " + plan_path + limit + " --search-work 0");
  EXPECT_EQ(run.status, 2);
  EXPECT_THAT(run.err, HasSubstr("needs 4 granules of 2 MiB where the limit"));
  EXPECT_THAT(run.err, HasSubstr("holds 3"));
  EXPECT_THAT(run.err, HasSubstr("--search-work"));
  EXPECT_FALSE(std::filesystem::exists(plan_path));

  run = run_plan(trace_path + " -o " + plan_path + limit + " --search-work 0 --force");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("WARNING: does not fit the limit: 1 granules over"));
  EXPECT_EQ(plimsoll::engine::read_run_plan(plan_path).covered_granules, 4u);

  run = run_plan(trace_path + " -o " + plan_path + limit + " --search-work 200000 --json");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(nlohmann::json::parse(run.out)["granules"], 3);
  EXPECT_EQ(plimsoll::engine::read_run_plan(plan_path).covered_granules, 3u);
}

TEST(CliRunPlan, BadInputNamesTheProblemAndTheFix) {
  const std::string trace_path = write_temp("t.trace", kTrace);
  const std::string plan_path = temp_path("t.plan");
  struct Case {
    std::string args;
    std::string says;
  };
  const Case cases[] = {
      {temp_path("absent.trace") + " -o " + plan_path, "absent.trace"},
      {write_temp("bad.trace", "a 1 256\nf 2\n") + " -o " + plan_path, "bad.trace"},
      {trace_path + " -o " + plan_path + " --through-step 3", "has 3 steps (indices 0..2), no step 3"},
      {trace_path + " -o " + plan_path + " --through-step -1", "--through-step -1"},
      {trace_path + " -o " + plan_path + " --limit-over-live 0", "--limit-over-live"},
      {trace_path + " -o " + plan_path + " --search-seeds 0", "--search-seeds"},
      {trace_path + " -o " + temp_path("no/such/folder/t.plan"), "-o"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args);
    const CliRun run = run_plan(c.args);
    EXPECT_EQ(run.status, 2);
    EXPECT_THAT(run.err, HasSubstr(c.says));
    EXPECT_FALSE(std::filesystem::exists(plan_path));
  }
  EXPECT_EQ(run_plan(trace_path).status, 2);  // -o is required
}

// A real trace (GPT through step 1, 1,329 requests, about a second): the file the command writes is exactly the plan
// the library packs in this process (the packing is deterministic), and every request is placed with no two live
// requests sharing a byte, within the target's limit.
TEST(CliRunPlan, ARealTracesFileIsWhatTheLibraryPacks) {
  const std::string trace_path = PLIMSOLL_TRACES_DIR "/gpt-6-512-b8.trace";
  const std::string plan_path = temp_path("gpt.plan");
  const CliRun run = run_plan(trace_path + " -o " + plan_path + " --through-step 1 --json");
  ASSERT_EQ(run.status, 0) << run.err;
  const plimsoll::engine::RunPlan written = plimsoll::engine::read_run_plan(plan_path);
  const plimsoll::Trace trace = plimsoll::read_trace(trace_path);
  plimsoll::engine::RunPlanRequest request;  // the command's defaults: the target's limit, the default search
  request.through_step = 1;
  const plimsoll::engine::PackedRunPlan packed = plimsoll::engine::pack_run_plan(trace, request);
  EXPECT_TRUE(written == packed.plan);
  ASSERT_EQ(written.entries.size(), 1329u);
  EXPECT_EQ(written.fingerprint.size(), plimsoll::engine::RunPlan::kFingerprint);
  EXPECT_LE(written.covered_granules, written.limit / written.granule);
  EXPECT_EQ(nlohmann::json::parse(run.out)["granules"], written.covered_granules);
  plimsoll::testing::expect_valid(plimsoll::engine::observe_run(trace, packed.events), as_step_plan(written));
}

}  // namespace
