// `plimsoll plan` as a user runs it: the built binary on real `plimsoll train` recordings (tests/data/plan), its text,
// its JSON keys (docs/plan.md), --fit, --html, and a clear error with exit status 2 for each kind of bad input.
#include <cstdint>
#include <set>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_runner.hpp"
#include "plan_fixtures.hpp"
#include "plimsoll/device.hpp"

namespace {

using ::testing::HasSubstr;
using plimsoll::testing::CliRun;
using plimsoll::testing::read_text_file;
using plimsoll::testing::recorded_cnn;
using plimsoll::testing::toy_trace;
using plimsoll::testing::write_temp;

CliRun plimsoll_plan(const std::string& args) { return plimsoll::testing::run_plimsoll("plan " + args); }

std::set<std::string> keys_of(const nlohmann::json& object) {
  std::set<std::string> keys;
  for (const auto& item : object.items()) keys.insert(item.key());
  return keys;
}

TEST(CliPlan, PredictsTheRecordedBatch32RunFromBatches8And16) {
  const std::string b8 = recorded_cnn(8);
  const std::string b16 = recorded_cnn(16);
  const std::string b32 = recorded_cnn(32);
  const CliRun predicted = plimsoll_plan(b8 + " " + b16 + " --batch 32 --json");
  ASSERT_EQ(predicted.status, 0) << predicted.err;
  const CliRun recorded = plimsoll_plan(b32 + " --json");
  ASSERT_EQ(recorded.status, 0) << recorded.err;
  const nlohmann::json p = nlohmann::json::parse(predicted.out);
  const nlohmann::json r = nlohmann::json::parse(recorded.out);
  EXPECT_EQ(p["batch"], 32);
  EXPECT_EQ(r["batch"], 32);
  ASSERT_EQ(p["predictions"].size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    SCOPED_TRACE(p["predictions"][i]["allocator"].get<std::string>());
    EXPECT_EQ(p["predictions"][i]["allocator"], r["predictions"][i]["allocator"]);
    EXPECT_EQ(p["predictions"][i]["peak_live_bytes"], r["predictions"][i]["peak_live_bytes"]);
    EXPECT_EQ(p["predictions"][i]["peak_reserved_bytes"], r["predictions"][i]["peak_reserved_bytes"]);
    EXPECT_EQ(p["predictions"][i]["fits"], true);
    for (const char* key : {"allocator", "peak_live_bytes", "peak_reserved_bytes", "fits", "peak_fill"}) {
      EXPECT_TRUE(p["predictions"][i].contains(key)) << key;
    }
  }
  EXPECT_EQ(p["predictions"][0]["allocator"], "plimsoll");
  EXPECT_EQ(p["predictions"][1]["allocator"], "pytorch");
  EXPECT_EQ(p["predictions"][2]["allocator"], "tensorflow");
  EXPECT_EQ(p["model"]["job"], "fashion_cnn");
  EXPECT_EQ(p["model"]["recorded_batches"], nlohmann::json::array({8, 16}));
  EXPECT_GT(p["model"]["allocation_fits"]["linear"].get<int>(), 0);
  EXPECT_EQ(p["model"]["allocation_fits"]["neither"], 0);
  // What fills the peak, by the tags `plimsoll train` records.
  std::set<std::string> names;
  for (const auto& share : p["predictions"][0]["peak_fill"]) names.insert(share["name"].get<std::string>());
  EXPECT_TRUE(names.count("activations") == 1 && names.count("weights") == 1) << p["predictions"][0]["peak_fill"];
}

TEST(CliPlan, TextReportNamesTheExtrapolationAndTheFits) {
  const CliRun run = plimsoll_plan(recorded_cnn(8) + " " + recorded_cnn(16) + " --batch 256 --device 16GiB");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("fashion_cnn: 3 steps recorded at batch 8, 16"));
  EXPECT_THAT(run.out, HasSubstr("batch 256 is 16x the largest recorded batch (16): extrapolated far beyond"));
  EXPECT_THAT(run.out, HasSubstr("linear in the batch size"));
  EXPECT_THAT(run.out, HasSubstr("plimsoll "));
  EXPECT_THAT(run.out, HasSubstr("activations"));
}

TEST(CliPlan, FitFindsTheLargestBatchAndReportsTheFirstThatDoesNotFit) {
  const std::string html = ::testing::TempDir() + "plan_fit.html";
  const CliRun run =
      plimsoll_plan(recorded_cnn(8) + " " + recorded_cnn(16) + " --fit --device sim:40MiB --json --html " + html);
  ASSERT_EQ(run.status, 0) << run.err;
  const nlohmann::json out = nlohmann::json::parse(run.out);
  EXPECT_EQ(keys_of(out), (std::set<std::string>{"batch", "device_bytes", "margin", "predictions", "model"}));
  std::uint64_t smallest = UINT64_MAX;
  for (const auto& entry : out["predictions"]) {
    SCOPED_TRACE(entry["allocator"].get<std::string>());
    const std::uint64_t largest = entry["largest_batch"];
    smallest = std::min(smallest, largest);
    EXPECT_GT(largest, 16u);
    EXPECT_EQ(entry["fits"], true);
    EXPECT_LE(entry["peak_reserved_bytes"].get<std::uint64_t>(), std::uint64_t{40} << 20);
    EXPECT_EQ(entry["first_too_large"]["batch"], largest + 1);
    EXPECT_THAT(entry["first_too_large"]["oom_report"].get<std::string>(), HasSubstr("out of memory"));
    // The answer checked at its own batch size and the next.
    const nlohmann::json at = nlohmann::json::parse(
        plimsoll_plan(recorded_cnn(8) + " " + recorded_cnn(16) + " --device sim:40MiB --json --allocator " +
                      entry["allocator"].get<std::string>() + " --batch " + std::to_string(largest + 1))
            .out);
    EXPECT_EQ(at["predictions"][0]["fits"], false);
  }
  EXPECT_EQ(out["batch"], smallest);
  const std::string page = read_text_file(html);
  EXPECT_THAT(page, HasSubstr("<svg"));
  EXPECT_THAT(page, HasSubstr("device 40.00 MiB"));
  EXPECT_THAT(page, HasSubstr("tensorflow (peak reserved)"));
}

TEST(CliPlan, FitTextStatesTheMargin) {
  const CliRun run = plimsoll_plan(recorded_cnn(8) + " " + recorded_cnn(16) +
                                   " --fit --device 40MiB --margin 0.1 --allocator plimsoll");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("keeping 10% of it free"));
  EXPECT_THAT(run.out, HasSubstr("the first that does not fit:"));
  EXPECT_THAT(run.out, HasSubstr("plimsoll: out of memory on sim:"));
}

TEST(CliPlan, TracesWithoutMarkersTakeTheirBatchFromTheCommandLine) {
  const std::string a = write_temp("a.trace", toy_trace(8, {.marker = false}));
  const std::string b = write_temp("b.trace", toy_trace(16, {.marker = false}));
  const CliRun missing = plimsoll_plan(a + " " + b);
  EXPECT_EQ(missing.status, 2);
  EXPECT_THAT(missing.err, HasSubstr("no batch size"));
  EXPECT_THAT(missing.err, HasSubstr("--batch-of"));
  const CliRun run = plimsoll_plan(a + " " + b + " --batch-of " + a + "=8 --batch-of " + b + "=16 --batch 64 --json");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(nlohmann::json::parse(run.out)["batch"], 64);
  EXPECT_THAT(plimsoll_plan(a + " --batch-of " + a + "=eight").err, HasSubstr("expected TRACE=N"));
  EXPECT_THAT(plimsoll_plan(a + " --batch-of other.trace=8").err, HasSubstr("no such trace"));
}

TEST(CliPlan, BadInputSaysWhatToRecordInstead) {
  const std::string cnn8 = recorded_cnn(8);
  const std::string cnn16 = recorded_cnn(16);
  struct Case {
    std::string args;
    std::string says;
  };
  const Case cases[] = {
      {cnn8 + " --batch 64", "predicts batch 8 only"},
      {cnn8 + " --fit", "--fit needs recordings at two or more batch sizes"},
      {cnn8 + " " + write_temp("other.trace", toy_trace(16, {.model = "other"})), "recordings of different jobs"},
      {cnn8 + " " + write_temp("sgd.trace", "# model fashion_cnn batch 16 optimizer sgd\n# step 1 begin\na 1 8\n# "
                                            "step 1 end\n"),
       "optimizer adam"},
      {write_temp("flat.trace", "# model toy batch 8\na 1 100\nf 1\n"), "has no training steps"},
      {cnn8 + " " + cnn16 + " --device 100KiB", "smaller than what fashion_cnn holds before its first step"},
      {cnn8 + " " + cnn16 + " --device lots", "expected sim:SIZE"},
      {cnn8 + " " + cnn16 + " --allocator jemalloc", "unknown allocator 'jemalloc'"},
      {cnn8 + " " + cnn16 + " --fit --margin 1.5", "margin 1.5"},
      {cnn8 + " " + cnn16 + " --html /nonexistent/dir/x.html", "--html"},
  };
  for (const Case& bad : cases) {
    SCOPED_TRACE(bad.args);
    const CliRun run = plimsoll_plan(bad.args);
    EXPECT_EQ(run.status, 2);
    EXPECT_THAT(run.err, HasSubstr(bad.says));
    EXPECT_TRUE(run.out.empty()) << run.out;
  }
}

TEST(CliPlan, OneSharedTraceAtItsOwnBatchMatchesItsReplay) {
  // A real PyTorch trace in the text format (no tags, no call sites): its steps are where its peak is, so plan's
  // peaks at its own batch size are replay's; what fills the peak is told by the step that made it.
  const std::string trace = std::string(PLIMSOLL_TRACES_DIR) + "/resnet18-b128-sgd.trace";
  const CliRun planned = plimsoll_plan(trace + " --allocator plimsoll --json");
  ASSERT_EQ(planned.status, 0) << planned.err;
  const CliRun replayed = plimsoll::testing::run_plimsoll("replay --json " + trace);
  ASSERT_EQ(replayed.status, 0) << replayed.err;
  const nlohmann::json plan = nlohmann::json::parse(planned.out);
  const nlohmann::json replay = nlohmann::json::parse(replayed.out);
  EXPECT_EQ(plan["batch"], 128);
  EXPECT_EQ(plan["model"]["job"], "resnet18");
  EXPECT_EQ(plan["predictions"][0]["peak_live_bytes"], replay["peak_live_bytes"]);
  EXPECT_EQ(plan["predictions"][0]["peak_reserved_bytes"], replay["peak_reserved_bytes"]);
  EXPECT_THAT(plan["predictions"][0]["peak_fill"][0]["name"].get<std::string>(), HasSubstr("made in step"));
  const CliRun mixed = plimsoll_plan(trace + " " + std::string(PLIMSOLL_TRACES_DIR) + "/vgg16-b16.trace");
  EXPECT_EQ(mixed.status, 2);
  EXPECT_THAT(mixed.err, HasSubstr("recordings of different jobs (model resnet18 against model vgg16"));
}

TEST(CliPlan, CudaDeviceNeedsADriver) {
  const plimsoll::GpuScan scan = plimsoll::scan_gpus();
  if (scan.unavailable_reason.empty() && !scan.gpus.empty()) {
    const CliRun run = plimsoll_plan(recorded_cnn(8) + " --device cuda:0 --json");
    ASSERT_EQ(run.status, 0) << run.err;
    EXPECT_EQ(nlohmann::json::parse(run.out)["device_bytes"], scan.gpus.front().total_bytes);
    return;
  }
  const CliRun run = plimsoll_plan(recorded_cnn(8) + " --device cuda:0");
  EXPECT_EQ(run.status, 2);
  EXPECT_THAT(run.err, HasSubstr("--device cuda:0: no GPU to read the size of"));
  EXPECT_THAT(run.err, HasSubstr("--device sim:16GiB"));
}

}  // namespace
