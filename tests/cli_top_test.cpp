// `plimsoll top`: --json with no ledger (an empty gpus list, exit 0), with ledgers (every field of a process, the
// loans), --once as text, and a corrupt ledger reported with the reason (exit 1). Reads ledgers only.
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "sharing/ledger.hpp"
#include "sharing_support.hpp"

namespace plimsoll {
namespace {

using ::testing::HasSubstr;
using plimsoll::testing::LiveProcess;
using plimsoll::testing::ProgramRun;
using plimsoll::testing::plimsoll_command;
using plimsoll::testing::TempDirectory;
constexpr std::uint64_t MiB = std::uint64_t{1} << 20;
constexpr const char* kUuid = "GPU-12345678-0000-0000-0000-000000000000";

TEST(CliTop, NoLedgerIsAnEmptyListAndSuccess) {
  const TempDirectory dir;
  const ProgramRun run = plimsoll_command({"top", "--json", "--ledger-dir", dir.path() + "/absent"});
  ASSERT_EQ(run.status, 0) << run.err;
  const nlohmann::json document = nlohmann::json::parse(run.out);
  EXPECT_TRUE(document["gpus"].is_array());
  EXPECT_TRUE(document["gpus"].empty());
  EXPECT_TRUE(document["errors"].empty());
  const ProgramRun text = plimsoll_command({"top", "--once"}, {{"PLIMSOLL_LEDGER_DIR", dir.path()}});
  EXPECT_EQ(text.status, 0);
  EXPECT_THAT(text.out, HasSubstr("no GPU ledger in " + dir.path()));
}

TEST(CliTop, ShowsEveryGovernedProcessAndWhoBorrowsFromWhom) {
  const TempDirectory dir;
  const LiveProcess engine_process, driver_process;
  sharing::Ledger ledger(sharing::LedgerFile::open_or_create(dir.path(), kUuid, 1000 * MiB));
  const int lender = ledger.join(sharing::Member{.who = driver_process.identity(), .share = 400 * MiB,
                                                 .cap = 400 * MiB, .can_trim = false, .interposed = true,
                                                 .command = "python"});
  const int borrower = ledger.join(sharing::Member{.who = engine_process.identity(), .share = 100 * MiB,
                                                   .cap = 1000 * MiB, .can_trim = true, .interposed = false,
                                                   .command = "trainer"});
  ledger.charge_unconditionally(lender, 50 * MiB, true);
  ASSERT_EQ(ledger.charge(borrower, 700 * MiB).verdict, sharing::Verdict::admitted);
  ledger.set_in_use(borrower, 300 * MiB);
  ASSERT_EQ(ledger.charge(lender, 300 * MiB).verdict, sharing::Verdict::needs_trim);

  const ProgramRun run = plimsoll_command({"top", "--json", "--ledger-dir", dir.path()});
  ASSERT_EQ(run.status, 0) << run.err;
  const nlohmann::json gpu = nlohmann::json::parse(run.out)["gpus"].at(0);
  EXPECT_EQ(gpu["uuid"], kUuid);
  EXPECT_EQ(gpu["limit_bytes"], 1000 * MiB);
  EXPECT_EQ(gpu["reserved_bytes"], 750 * MiB);
  ASSERT_EQ(gpu["processes"].size(), 2u);
  const nlohmann::json& python = gpu["processes"][0];
  EXPECT_EQ(python["pid"], driver_process.pid());
  EXPECT_EQ(python["command"], "python");
  EXPECT_EQ(python["governed_by"], "driver");
  EXPECT_EQ(python["context_bytes"], 50 * MiB);
  EXPECT_EQ(python["refusals"], 1);
  const nlohmann::json& trainer = gpu["processes"][1];
  EXPECT_EQ(trainer["governed_by"], "engine");
  EXPECT_EQ(trainer["in_use_bytes"], 300 * MiB);
  EXPECT_EQ(trainer["reserved_bytes"], 700 * MiB);
  EXPECT_EQ(trainer["peak_bytes"], 700 * MiB);
  EXPECT_EQ(trainer["borrowed_bytes"], 600 * MiB);
  EXPECT_EQ(trainer["trim_requests"], 1);
  EXPECT_GT(trainer["trim_requested_bytes"], 0);
  // 500 MiB no share covers, then 100 MiB of python's unused 350 MiB.
  ASSERT_EQ(gpu["loans"].size(), 2u);
  EXPECT_EQ(gpu["loans"][0]["lender"], "unshared");
  EXPECT_EQ(gpu["loans"][0]["bytes"], 500 * MiB);
  EXPECT_EQ(gpu["loans"][1]["lender"], driver_process.pid());
  EXPECT_EQ(gpu["loans"][1]["bytes"], 100 * MiB);

  const ProgramRun text = plimsoll_command({"top", "--once", "--ledger-dir", dir.path()});
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr(std::string("GPU ") + kUuid + ": limit 1000.00 MiB, 750.00 MiB held"));
  EXPECT_THAT(text.out, HasSubstr("trainer"));
  EXPECT_THAT(text.out, HasSubstr("0/1 pending"));
  EXPECT_THAT(text.out, HasSubstr("borrows 100.00 MiB of pid " + std::to_string(driver_process.pid()) + "'s share"));
}

TEST(CliTop, DeadProcessesAreMarked) {
  const TempDirectory dir;
  LiveProcess victim;
  sharing::Ledger ledger(sharing::LedgerFile::open_or_create(dir.path(), kUuid, 1000 * MiB));
  ledger.join(sharing::Member{.who = victim.identity(), .share = 10 * MiB, .cap = 10 * MiB, .can_trim = false,
                              .interposed = true, .command = "victim"});
  victim.kill();
  const ProgramRun run = plimsoll_command({"top", "--json", "--ledger-dir", dir.path()});
  const nlohmann::json gpu = nlohmann::json::parse(run.out)["gpus"].at(0);
  EXPECT_EQ(gpu["processes"][0]["running"], false);
  EXPECT_THAT(plimsoll_command({"top", "--once", "--ledger-dir", dir.path()}).out, HasSubstr("victim (dead)"));
}

TEST(CliTop, CorruptLedgerIsReportedNotTrusted) {
  const TempDirectory dir;
  std::ofstream(dir.path() + "/plimsoll-ledger-GPU-bad") << "garbage";
  const ProgramRun run = plimsoll_command({"top", "--json", "--ledger-dir", dir.path()});
  EXPECT_EQ(run.status, 1);
  const nlohmann::json document = nlohmann::json::parse(run.out);
  EXPECT_TRUE(document["gpus"].empty());
  ASSERT_EQ(document["errors"].size(), 1u);
  EXPECT_THAT(document["errors"][0]["error"].get<std::string>(), HasSubstr("cannot be used"));
  const ProgramRun text = plimsoll_command({"top", "--once", "--ledger-dir", dir.path()});
  EXPECT_EQ(text.status, 1);
  EXPECT_THAT(text.out, HasSubstr("error: the GPU ledger"));
}

TEST(CliTop, BadIntervalIsRefused) {
  EXPECT_NE(plimsoll_command({"top", "--interval", "0"}).status, 0);
}

}  // namespace
}  // namespace plimsoll
