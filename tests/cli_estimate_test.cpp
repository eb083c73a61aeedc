// `plimsoll estimate` as a user runs it: the built binary's JSON and tables, and exit status 2 with a message
// naming the bad value for input it cannot use.
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_runner.hpp"

namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;

using plimsoll::testing::CliRun;

CliRun plimsoll(const std::string& args) { return plimsoll::testing::run_plimsoll(args); }

using plimsoll::testing::lines_of;

std::set<std::string> keys_of(const nlohmann::json& object) {
  std::set<std::string> keys;
  for (const auto& item : object.items()) keys.insert(item.key());
  return keys;
}

// The line of a table whose first cell is `label`, or "" if none.
std::string row_starting(const std::string& text, const std::string& label) {
  for (const std::string& line : lines_of(text)) {
    if (line.rfind(label + " ", 0) == 0) return line;
  }
  return {};
}

const std::set<std::string> kBatchKeys = {
    "shape",           "dtype",       "dtype_bytes",    "batch",        "queue",
    "workers",         "batch_bytes", "queue_bytes",    "in_flight_bytes", "consumer_bytes",
    "total_bytes",     "budget_bytes", "max_queue_for_budget", "fits_budget", "budget_note"};

TEST(CliEstimate, BatchJsonIsOneObjectWithTheBytes) {
  const CliRun run = plimsoll("estimate batch --shape 224x224x3 --batch 128 --dtype float32 --queue 10 "
                              "--workers 4 --json");
  ASSERT_EQ(run.status, 0) << run.err;
  ASSERT_EQ(lines_of(run.out).size(), 1u) << run.out;
  const nlohmann::json out = nlohmann::json::parse(run.out);
  EXPECT_EQ(keys_of(out), kBatchKeys);
  EXPECT_EQ(out["shape"], "224x224x3");
  EXPECT_EQ(out["dtype"], "float32");
  EXPECT_EQ(out["batch_bytes"], 77070336u);
  EXPECT_EQ(out["queue_bytes"], 770703360u);
  EXPECT_EQ(out["in_flight_bytes"], 308281344u);
  EXPECT_EQ(out["consumer_bytes"], 77070336u);
  EXPECT_EQ(out["total_bytes"], 1156055040u);
  EXPECT_TRUE(out["budget_bytes"].is_null());
  EXPECT_TRUE(out["max_queue_for_budget"].is_null());
  EXPECT_TRUE(out["fits_budget"].is_null());
  EXPECT_TRUE(out["budget_note"].is_null());
  EXPECT_THAT(run.err, IsEmpty());
}

TEST(CliEstimate, BatchJsonWithABudgetGivesTheDeepestQueue) {
  const CliRun run = plimsoll("estimate batch --shape 224x224x3 --batch 128 --budget 8GiB --json");
  ASSERT_EQ(run.status, 0) << run.err;
  const nlohmann::json out = nlohmann::json::parse(run.out);
  EXPECT_EQ(out["queue"], 10u);  // the defaults: --queue 10 --workers 4 --dtype float32
  EXPECT_EQ(out["workers"], 4u);
  EXPECT_EQ(out["budget_bytes"], 8589934592u);
  EXPECT_EQ(out["max_queue_for_budget"], 106u);
  EXPECT_EQ(out["fits_budget"], true);
  EXPECT_THAT(out["budget_note"].get<std::string>(), HasSubstr("up to 106 batches"));
}

TEST(CliEstimate, BudgetSmallerThanOneBatchGivesZeroAndSaysWhy) {
  const CliRun run = plimsoll("estimate batch --shape 224x224x3 --batch 128 --budget 64MiB --json");
  ASSERT_EQ(run.status, 0) << run.err;
  const nlohmann::json out = nlohmann::json::parse(run.out);
  EXPECT_EQ(out["max_queue_for_budget"], 0u);
  EXPECT_EQ(out["fits_budget"], false);
  EXPECT_THAT(out["budget_note"].get<std::string>(),
              AllOf(HasSubstr("smaller than one batch (73.50 MiB)"), HasSubstr("lower --batch")));
}

TEST(CliEstimate, BatchTableShowsEachHolderInIecUnits) {
  const CliRun run = plimsoll("estimate batch --shape 224x224x3 --batch 128 --budget 8GiB");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_THAT(run.out, StartsWith("224x224x3 float32 x 128 samples: 73.50 MiB per batch\n"));
  EXPECT_THAT(row_starting(run.out, "queue"), AllOf(HasSubstr(" 10 "), HasSubstr("770703360"),
                                                    HasSubstr("735.00 MiB")));
  EXPECT_THAT(row_starting(run.out, "in"), AllOf(HasSubstr("(4 workers)"), HasSubstr("294.00 MiB")));
  EXPECT_THAT(row_starting(run.out, "consumer"), HasSubstr("73.50 MiB"));
  EXPECT_THAT(row_starting(run.out, "total"), AllOf(HasSubstr(" 15 "), HasSubstr("1156055040"),
                                                    HasSubstr("1.08 GiB")));
  EXPECT_THAT(run.out, HasSubstr("the budget 8.00 GiB holds a queue of up to 106 batches"));
}

TEST(CliEstimate, TableOfFloat32IsTheResolutionByBatchGridInGiB) {
  const CliRun run = plimsoll("estimate table --dtype float32");
  ASSERT_EQ(run.status, 0) << run.err;
  const std::string header = row_starting(run.out, "resolution");
  EXPECT_THAT(header, AllOf(HasSubstr(" 32 "), HasSubstr(" 128 "), HasSubstr(" 65536")));
  // 224x224x3 float32: batch 128 is 0.0718 GiB, batch 65536 is 36.75 GiB.
  EXPECT_THAT(row_starting(run.out, "224x224"), AllOf(HasSubstr(" 0.0718 "), HasSubstr(" 36.8")));
  EXPECT_THAT(row_starting(run.out, "1024x1024"), HasSubstr(" 768"));
  EXPECT_THAT(row_starting(run.out, "32x32"), HasSubstr("0.000366"));
}

TEST(CliEstimate, TableJsonHasExactBytes) {
  const CliRun run = plimsoll("estimate table --dtype uint8 --channels 1 --json");
  ASSERT_EQ(run.status, 0) << run.err;
  const nlohmann::json out = nlohmann::json::parse(run.out);
  EXPECT_EQ(out["dtype"], "uint8");
  EXPECT_EQ(out["channels"], 1u);
  ASSERT_EQ(out["resolutions"].size(), 7u);
  ASSERT_EQ(out["batches"].size(), 12u);
  EXPECT_EQ(out["bytes"][0][0], 32u * 32 * 32);
  EXPECT_EQ(out["bytes"][6][11], 1024ull * 1024 * 65536);
  EXPECT_DOUBLE_EQ(out["gib"][6][11].get<double>(), 64.0);
}

// Each bad value: exit status 2, the value quoted, and what to write instead.
TEST(CliEstimate, BadInputExitsWithStatus2AndNamesTheValue) {
  struct Case {
    std::string args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"batch --shape 224x --batch 128", "invalid shape \"224x\": dimension 2 is missing"},
      {"batch --shape 0x3 --batch 128", "invalid shape \"0x3\": dimension 1 is 0"},
      {"batch --shape abc --batch 128", "invalid shape \"abc\""},
      {"batch --shape 4294967296x4294967296 --batch 1", "2^64 elements or more"},
      {"batch --shape 4294967296x4294967295 --batch 2", "2^64 bytes or more; lower the batch size"},
      {"batch --shape 224x224x3 --batch 0", "--batch 0 is too small"},
      {"batch --shape 224x224x3 --batch -5", "--batch -5 is negative"},
      {"batch --shape 224x224x3 --batch many", "--batch \"many\" is not a whole number"},
      {"batch --shape 224x224x3 --batch 128 --queue -1", "--queue -1 is negative"},
      {"batch --shape 224x224x3 --batch 128 --workers 2.5", "--workers \"2.5\" is not a whole number"},
      {"batch --shape 224x224x3 --batch 128 --dtype float8", "unknown dtype \"float8\""},
      {"batch --shape 224x224x3 --batch 128 --budget lots", "invalid size \"lots\""},
      {"table --channels 0", "--channels 0 is too small"},
      {"table --dtype int4", "unknown dtype \"int4\""},
  };
  for (const Case& test : cases) {
    const CliRun run = plimsoll("estimate " + test.args);
    EXPECT_EQ(run.status, 2) << test.args;
    EXPECT_THAT(run.err, AllOf(StartsWith("plimsoll: error: "), HasSubstr(test.message))) << test.args;
    EXPECT_THAT(run.out, IsEmpty()) << test.args;
  }
}

}  // namespace
