// `plimsoll replay` as a user runs it: the built binary, its output, its exit status.
#include <filesystem>
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

CliRun plimsoll(const std::string& args, const std::string& env = "") {
  return plimsoll::testing::run_plimsoll(args, env);
}

using plimsoll::testing::lines_of;

std::string trace_path(const std::string& file) { return std::string(PLIMSOLL_TRACES_DIR) + "/" + file; }

std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

const std::set<std::string> kJsonKeys = {
    "trace",         "device", "policy", "steps", "steps_from", "peak_live_bytes", "peak_in_use_bytes",
    "peak_reserved_bytes", "reserved_over_live", "maps", "unmaps", "steady_maps", "steady_unmaps", "maps_by_step", "unmaps_by_step", "step_plan", "run_plan", "oom", "oom_event", "ops", "ns_per_op"};
const std::set<std::string> kStepPlanKeys = {"steps",   "plans",       "unfit",    "stale",     "learning",  "followed",
                                             "growth",
                                             "fallbacks", "not_in_plan", "occupied", "over_limit", "past_plan",
                                             "skipped", "plan_bytes",  "plan_peak_bytes", "packs", "pack_ms",
                                             "transitions", "transition_followed", "transition_maps",
                                             "transition_unmaps", "transitions_abandoned", "steps_given_up"};

TEST(CliReplay, JsonHasOneLinePerPolicyWithExactlyTheDocumentedKeys) {
  const std::string gpt = trace_path("gpt-6-512-b8.trace");
  const CliRun run = plimsoll("replay " + gpt + " --compare preallocate,on_demand --json");
  ASSERT_EQ(run.status, 0) << run.err;
  const std::vector<std::string> lines = lines_of(run.out);
  ASSERT_EQ(lines.size(), 2u) << run.out;

  const std::array<std::string, 2> policies = {"preallocate", "on_demand"};
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const nlohmann::json row = nlohmann::json::parse(lines[i]);
    std::set<std::string> keys;
    for (const auto& item : row.items()) keys.insert(item.key());
    EXPECT_EQ(keys, kJsonKeys);
    std::set<std::string> plan_keys;
    for (const auto& item : row["step_plan"].items()) plan_keys.insert(item.key());
    EXPECT_EQ(plan_keys, kStepPlanKeys);
    // gpt-6-512-b8 has three marked steps: the first is observed, the next two placed by the plan, mostly.
    EXPECT_EQ(row["step_plan"]["steps"].get<std::uint64_t>(), 3u);
    EXPECT_GE(row["step_plan"]["plans"].get<std::uint64_t>(), 1u);
    EXPECT_GT(row["step_plan"]["followed"].get<std::uint64_t>(), row["step_plan"]["fallbacks"].get<std::uint64_t>());
    // Every plan, unfit or stale one was one pack, and packing took time.
    EXPECT_EQ(row["step_plan"]["packs"].get<std::uint64_t>(),
              row["step_plan"]["plans"].get<std::uint64_t>() + row["step_plan"]["unfit"].get<std::uint64_t>() +
                  row["step_plan"]["stale"].get<std::uint64_t>());
    EXPECT_GT(row["step_plan"]["pack_ms"].get<double>(), 0.0);

    EXPECT_EQ(row["trace"], gpt);
    EXPECT_EQ(row["device"], "sim:16GiB");
    EXPECT_EQ(row["policy"], policies[i]);
    EXPECT_EQ(row["peak_live_bytes"].get<std::uint64_t>(), 1280932064u);
    EXPECT_GE(row["peak_in_use_bytes"].get<std::uint64_t>(), 1280932064u);
    EXPECT_GE(row["peak_reserved_bytes"].get<std::uint64_t>(), row["peak_in_use_bytes"].get<std::uint64_t>());
    EXPECT_GE(row["reserved_over_live"].get<double>(), 1.0);
    EXPECT_TRUE(row["maps"].is_number_unsigned());
    EXPECT_LE(row["steady_maps"].get<std::uint64_t>(), row["maps"].get<std::uint64_t>());
    EXPECT_LE(row["steady_unmaps"].get<std::uint64_t>(), row["unmaps"].get<std::uint64_t>());
    EXPECT_EQ(row["oom"], false);
    EXPECT_TRUE(row["oom_event"].is_null());
    EXPECT_EQ(row["ops"].get<std::size_t>(), 2u * 1978u);
    EXPECT_GT(row["ns_per_op"].get<double>(), 0.0);
  }
}

TEST(CliReplay, CompareBeforeTheTracesTakesOnlyItsOwnValues) {
  const std::string gpt = trace_path("gpt-6-512-b8.trace");
  const CliRun run = plimsoll("replay --compare preallocate --compare on_demand " + gpt + " --json");
  ASSERT_EQ(run.status, 0) << run.err;
  const std::vector<std::string> lines = lines_of(run.out);
  ASSERT_EQ(lines.size(), 2u) << run.out;
  EXPECT_EQ(nlohmann::json::parse(lines[0])["policy"], "preallocate");
  EXPECT_EQ(nlohmann::json::parse(lines[1])["policy"], "on_demand");
}

TEST(CliReplay, OutOfMemoryStillExitsZeroAndNamesTheEvent) {
  const CliRun run = plimsoll("replay " + trace_path("gpt-6-512-b8.trace") + " --memory-limit 64MiB --json");
  ASSERT_EQ(run.status, 0) << run.err;
  const nlohmann::json row = nlohmann::json::parse(run.out);
  EXPECT_EQ(row["oom"], true);
  ASSERT_TRUE(row["oom_event"].is_number_unsigned());
  EXPECT_LT(row["ops"].get<std::size_t>(), 2u * 1978u);
  EXPECT_LE(row["peak_reserved_bytes"].get<std::uint64_t>(), 64u << 20);
}

TEST(CliReplay, LimitOverLiveScalesTheLimitToTheTrace) {
  // Twice the peak live bytes is room enough; a tenth of it is not.
  const std::string gpt = trace_path("gpt-6-512-b8.trace");
  const CliRun roomy = plimsoll("replay " + gpt + " --limit-over-live 2 --json");
  ASSERT_EQ(roomy.status, 0) << roomy.err;
  EXPECT_EQ(nlohmann::json::parse(roomy.out)["oom"], false);
  const CliRun tight = plimsoll("replay " + gpt + " --limit-over-live 0.1 --json");
  ASSERT_EQ(tight.status, 0) << tight.err;
  EXPECT_EQ(nlohmann::json::parse(tight.out)["oom"], true);
}

TEST(CliReplay, TableHasARowPerTraceAndPolicy) {
  const CliRun run = plimsoll("replay " + trace_path("gpt-6-512-b8.trace") + " " +
                           trace_path("resnet18-b128-sgd.trace") + " --compare on_demand,preallocate");
  ASSERT_EQ(run.status, 0) << run.err;
  const std::vector<std::string> lines = lines_of(run.out);
  // header, rule, 2 traces x 2 policies, blank, step-aware placement: a title and a line per run, blank, a summary
  // per policy
  ASSERT_EQ(lines.size(), 15u) << run.out;
  EXPECT_THAT(lines[0], StartsWith("trace"));
  EXPECT_THAT(lines[0], HasSubstr("reserved/live"));
  EXPECT_THAT(lines[0], HasSubstr("steady maps"));
  EXPECT_THAT(lines[2], StartsWith("gpt-6-512-b8.trace"));
  EXPECT_THAT(lines[2], HasSubstr("on_demand"));
  EXPECT_THAT(lines[3], HasSubstr("preallocate"));
  EXPECT_THAT(lines[4], StartsWith("resnet18-b128-sgd.trace"));
  EXPECT_THAT(lines[2], HasSubstr("1.19 GiB"));  // 1280932064 bytes of peak live
  EXPECT_THAT(lines[2], HasSubstr(" no "));
  EXPECT_THAT(lines[0], HasSubstr("planned"));
  EXPECT_THAT(lines[7], StartsWith("step-aware placement"));
  EXPECT_THAT(lines[8], StartsWith("gpt-6-512-b8.trace (on_demand): "));
  EXPECT_THAT(lines[8], HasSubstr(" followed, "));
  EXPECT_THAT(lines[13], StartsWith("on_demand: 2 traces"));
  EXPECT_THAT(lines[14], StartsWith("preallocate: 2 traces"));
}

TEST(CliReplay, NoStepPlanReplaysWithBestFitAlone) {
  const CliRun run = plimsoll("replay " + trace_path("gpt-6-512-b8.trace") + " --no-step-plan --json");
  ASSERT_EQ(run.status, 0) << run.err;
  const nlohmann::json row = nlohmann::json::parse(lines_of(run.out).at(0));
  EXPECT_EQ(row["step_plan"]["steps"].get<std::uint64_t>(), 0u);
  EXPECT_EQ(row["step_plan"]["followed"].get<std::uint64_t>(), 0u);
  EXPECT_EQ(row["step_plan"]["packs"].get<std::uint64_t>(), 0u);
}

TEST(CliReplay, TableExplainsAnOutOfMemory) {
  const CliRun run = plimsoll("replay " + trace_path("gpt-6-512-b8.trace") + " --memory-limit 64MiB");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("at event "));
  EXPECT_THAT(run.out, HasSubstr("ran out of memory at line "));
}

TEST(CliReplay, BadTraceExitsTwoWithFileAndLine) {
  const std::string path = write_temp("cli_replay_bad.trace", "a 1 64\n\nf 2\n");
  const CliRun run = plimsoll("replay " + path + " --json");
  EXPECT_EQ(run.status, 2);
  EXPECT_TRUE(run.out.empty()) << run.out;
  EXPECT_THAT(run.err, StartsWith("plimsoll: error: " + path + ":3: free of id 2, which was never allocated"));
}

TEST(CliReplay, MissingTraceExitsTwoWithThePath) {
  const CliRun run = plimsoll("replay /nonexistent/none.trace");
  EXPECT_EQ(run.status, 2);
  EXPECT_THAT(run.err, StartsWith("plimsoll: error: /nonexistent/none.trace: cannot open the trace"));
}

TEST(CliReplay, UnknownDeviceExitsTwoNamingIt) {
  const CliRun run = plimsoll("replay " + trace_path("gpt-6-512-b8.trace") + " --device tpu:0 --json");
  EXPECT_EQ(run.status, 2);
  EXPECT_TRUE(run.out.empty()) << run.out;
  EXPECT_THAT(run.err, StartsWith("plimsoll: error: "));
  EXPECT_THAT(run.err, HasSubstr("tpu:0"));
}

TEST(CliReplay, UnknownPolicyExitsTwo) {
  const CliRun run = plimsoll("replay " + trace_path("gpt-6-512-b8.trace") + " --policy eager");
  EXPECT_EQ(run.status, 2);
  EXPECT_THAT(run.err, StartsWith("plimsoll: error: "));
  EXPECT_THAT(run.err, HasSubstr("eager"));
}

TEST(CliReplay, ConflictingLimitsAreAUsageError) {
  const CliRun run =
      plimsoll("replay " + trace_path("gpt-6-512-b8.trace") + " --memory-limit 1GiB --limit-over-live 1.03");
  EXPECT_EQ(run.status, 2);  // a usage error CLI11 found: bad input, like the others (CliUsageErrors)
  EXPECT_THAT(run.err, HasSubstr("excludes"));
}

TEST(CliReplay, WithoutTracesReplaysEverySharedTraceUnderBothPolicies) {
  const CliRun run = plimsoll("replay --json");
  ASSERT_EQ(run.status, 0) << run.err;
  std::set<std::pair<std::string, std::string>> runs;
  std::size_t trace_files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(PLIMSOLL_TRACES_DIR))
    trace_files += entry.path().extension() == ".trace" ? 1u : 0u;
  for (const std::string& line : lines_of(run.out)) {
    const nlohmann::json object = nlohmann::json::parse(line);
    EXPECT_EQ(object["device"], "sim:16GiB");
    EXPECT_FALSE(object["oom"].get<bool>()) << line;
    runs.emplace(object["trace"].get<std::string>(), object["policy"].get<std::string>());
  }
  EXPECT_GE(trace_files, 1u);
  EXPECT_EQ(runs.size(), 2 * trace_files) << run.out;
  for (const auto& [trace, policy] : runs) EXPECT_TRUE(policy == "preallocate" || policy == "on_demand") << policy;
}

TEST(CliReplay, TableLogsEachPolicysDeviceOnce) {
  const CliRun run = plimsoll("replay");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(lines_of(run.err).size(), 2u) << run.err;
  EXPECT_THAT(run.err, HasSubstr("policy preallocate"));
  EXPECT_THAT(run.err, HasSubstr("policy on_demand"));
  EXPECT_THAT(run.out, HasSubstr("reserved/live"));
}

TEST(CliReplay, TableEndsWithOneSummaryLinePerPolicy) {
  const std::string traces = trace_path("gpt-6-512-b8.trace") + " " + trace_path("resnet18-b128-sgd.trace");
  const CliRun roomy = plimsoll("replay " + traces + " --compare preallocate,on_demand");
  ASSERT_EQ(roomy.status, 0) << roomy.err;
  EXPECT_THAT(roomy.out, HasSubstr("\npreallocate: 2 traces, reserved/live "));
  EXPECT_THAT(roomy.out, HasSubstr("\non_demand: 2 traces, reserved/live 1."));
  EXPECT_THAT(roomy.out, HasSubstr(", no OOM; "));

  const CliRun tight = plimsoll("replay " + traces + " --memory-limit 64MiB");
  ASSERT_EQ(tight.status, 0) << tight.err;
  EXPECT_THAT(tight.out, HasSubstr("\non_demand: 2 traces, 2 ran out of memory; "));
}

TEST(CliReplay, ATightLimitOnARealTraceIsReportedAsFragmentation) {
  // 187 MiB live, 192.77 MiB limit: 6 MiB stay free, in pieces smaller than the 2.25 MiB request.
  const CliRun run = plimsoll("replay " + trace_path("leak-clean-resnet18.trace") + " --limit-over-live 1.03");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("cause:              fragmented"));
  EXPECT_THAT(run.out, HasSubstr("raise memory_limit to >= 194.00 MiB"));
}

TEST(CliReplay, AnEmptyTraceFolderIsAnErrorThatNamesTheFix) {
  const std::string empty = ::testing::TempDir() + "cli_replay_empty_dir";
  std::filesystem::create_directories(empty);
  const CliRun run = plimsoll("replay", "PLIMSOLL_TRACE_DIR=" + empty);
  EXPECT_EQ(run.status, 2);
  EXPECT_THAT(run.err, HasSubstr(empty));
  EXPECT_THAT(run.err, HasSubstr("holds no .trace file"));
  EXPECT_THAT(run.err, HasSubstr("PLIMSOLL_TRACE_DIR"));
  const CliRun missing = plimsoll("replay", "PLIMSOLL_TRACE_DIR=/nonexistent/plimsoll-traces");
  EXPECT_EQ(missing.status, 2);
  EXPECT_THAT(missing.err, HasSubstr("/nonexistent/plimsoll-traces cannot be read"));
}

TEST(CliReplay, HelpDocumentsLimitOverLive) {
  const CliRun run = plimsoll("replay --help");
  EXPECT_EQ(run.status, 0);
  EXPECT_THAT(run.out, HasSubstr("--limit-over-live"));
  EXPECT_THAT(run.out, HasSubstr("peak live bytes"));
}

}  // namespace

namespace {

// Steps 0-2; step 1 keeps a "gradient" (id 3) that step 2 frees while keeping its own (id 5).
const char* const kThreeSteps =
    "a 1 1048576\n"
    "# step 0 begin\na 2 4194304\nf 2\n# step 0 end\n"
    "# step 1 begin\na 3 2097152\na 4 4194304\nf 4\n# step 1 end\n"
    "# step 2 begin\na 5 2097152\nf 3\na 6 4194304\nf 6\n# step 2 end\n"
    "f 5\nf 1\n";

TEST(CliReplay, RepeatLastStepAddsStepsAndReportsMapsPerStep) {
  const std::string path = write_temp("three_steps.trace", kThreeSteps);
  const CliRun run = plimsoll("replay " + path + " --policy on_demand --json --repeat-last-step 4");
  ASSERT_EQ(run.status, 0) << run.err;
  const nlohmann::json row = nlohmann::json::parse(lines_of(run.out).at(0));
  EXPECT_EQ(row["steps"], 7);
  ASSERT_EQ(row["maps_by_step"].size(), 7u) << run.out;
  ASSERT_EQ(row["unmaps_by_step"].size(), 7u);
  std::uint64_t in_steps = 0;
  for (const auto& maps : row["maps_by_step"]) in_steps += maps.get<std::uint64_t>();
  EXPECT_LE(in_steps, row["maps"].get<std::uint64_t>());
  EXPECT_GE(in_steps, row["steady_maps"].get<std::uint64_t>());
  // The leftover pairs with the gradient it replaces, so the copies hold one of them, not one more each step.
  EXPECT_EQ(row["peak_live_bytes"], 1048576 + 2097152 + 4194304);
  EXPECT_FALSE(row["oom"].get<bool>());

  // Best fit alone, the 4 MiB temporary cannot reuse what 2 MiB blocks leave: the text names the busy steps.
  const CliRun table =
      plimsoll("replay " + path + " --policy on_demand --repeat-last-step 4 --memory-limit 8MiB --no-step-plan");
  ASSERT_EQ(table.status, 0) << table.err;
  EXPECT_THAT(table.out, HasSubstr("maps/unmaps by step"));
  EXPECT_THAT(table.out, HasSubstr("three_steps.trace (on_demand): steps 0 ("));
}

TEST(CliReplay, RepeatLastStepRejectsBadCountsAndTracesWithoutSteps) {
  const std::string path = write_temp("three_steps_bad.trace", kThreeSteps);
  for (const std::string bad : {"-1", "1001", "many"}) {
    const CliRun run = plimsoll("replay " + path + " --repeat-last-step " + bad);
    EXPECT_EQ(run.status, 2) << bad;
    EXPECT_THAT(run.err, HasSubstr("--repeat-last-step")) << bad;
  }
  const std::string flat = write_temp("flat_steps.trace", "a 1 1024\nf 1\n");
  const CliRun run = plimsoll("replay " + flat + " --repeat-last-step 2");
  EXPECT_EQ(run.status, 2);
  EXPECT_THAT(run.err, HasSubstr("no training steps to repeat"));
  EXPECT_THAT(run.err, HasSubstr("drop --repeat-last-step"));
  // Without the option, or with 0, a trace without steps replays as before.
  for (const std::string option : {"", " --repeat-last-step 0"}) {
    const CliRun plain = plimsoll("replay " + flat + option);
    EXPECT_EQ(plain.status, 0) << option << ": " << plain.err;
  }
  const CliRun words = plimsoll("replay " + path + " --repeat-last-step many");
  EXPECT_THAT(words.err, Not(HasSubstr("not in range"))) << "the message names the fix, not CLI11's range";
}

}  // namespace
