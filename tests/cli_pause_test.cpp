// `plimsoll pause PID` / `plimsoll resume PID` (docs/sharing.md, "Pause and resume"): this test process is the governed
// job (a plimsoll Allocator under a GPU share, answering through its TrimResponder) and runs the command against
// itself; then every target the command must refuse, with its reason and exit status.
#include <unistd.h>

#include <chrono>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "plimsoll/allocator.hpp"
#include "plimsoll/sharing.hpp"
#include "sharing/ledger.hpp"
#include "sharing_support.hpp"

namespace plimsoll {
namespace {

using ::testing::HasSubstr;
using plimsoll::testing::LiveProcess;
using plimsoll::testing::ProgramRun;
using plimsoll::testing::TempDirectory;
using plimsoll::testing::shared_sim_allocator;
using plimsoll::testing::plimsoll_command;
constexpr std::uint64_t MiB = std::uint64_t{1} << 20;
constexpr const char* kUuid = "GPU-12345678-0000-0000-0000-00000000c11a";

TEST(CliPause, PausesAndResumesAGovernedJobByPid) {
  const TempDirectory dir;
  GpuShare share(kUuid, 100 * MiB, parse_share_spec("cuda:0=50MiB:100MiB"), dir.path());
  const auto device = shared_sim_allocator(share, 100 * MiB);
  Allocator& gpu = *device;
  const TrimResponder responder(share, allocator_hooks(gpu), std::chrono::milliseconds(5));
  void* block = gpu.allocate(20 * MiB);
  const std::string pid = std::to_string(::getpid());

  const ProgramRun paused = plimsoll_command({"pause", pid, "--json", "--ledger-dir", dir.path()});
  ASSERT_EQ(paused.status, 0) << paused.out << paused.err;
  const nlohmann::json answer = nlohmann::json::parse(paused.out);
  EXPECT_EQ(answer["action"], "pause");
  EXPECT_EQ(answer["done"], true);
  EXPECT_EQ(answer["gpus"][0]["uuid"], kUuid);
  EXPECT_THAT(answer["gpus"][0]["message"].get<std::string>(), HasSubstr("given back"));
  EXPECT_TRUE(gpu.paused());
  EXPECT_EQ(share.charged_bytes(), 0u);

  const ProgramRun top = plimsoll_command({"top", "--once", "--ledger-dir", dir.path()});
  EXPECT_THAT(top.out, HasSubstr("(paused)"));
  const ProgramRun twice = plimsoll_command({"pause", pid, "--ledger-dir", dir.path()});
  EXPECT_EQ(twice.status, 1);
  EXPECT_THAT(twice.out, HasSubstr("refused"));
  EXPECT_THAT(twice.out, HasSubstr("paused already"));

  const ProgramRun resumed = plimsoll_command({"resume", pid, "--ledger-dir", dir.path()});
  ASSERT_EQ(resumed.status, 0) << resumed.out << resumed.err;
  EXPECT_THAT(resumed.out, HasSubstr("done: resumed"));
  EXPECT_FALSE(gpu.paused());
  EXPECT_TRUE(gpu.owns(block));
  gpu.deallocate(block);
}

TEST(CliPause, RefusesProcessesItCannotPauseWithTheReason) {
  const TempDirectory dir;
  sharing::Ledger ledger(sharing::LedgerFile::open_or_create(dir.path(), kUuid, 100 * MiB));
  const LiveProcess ungoverned, interposed, silent;
  ledger.join(sharing::Member{.who = interposed.identity(), .share = 10 * MiB, .cap = 10 * MiB, .can_trim = false,
                              .interposed = true, .command = "jax"});
  ledger.join(sharing::Member{.who = silent.identity(), .share = 10 * MiB, .cap = 10 * MiB, .can_trim = true,
                              .interposed = false, .command = "silent"});

  const ProgramRun not_governed = plimsoll_command({"pause", std::to_string(ungoverned.pid()), "--ledger-dir", dir.path()});
  EXPECT_EQ(not_governed.status, 2);
  EXPECT_THAT(not_governed.err, HasSubstr("not governed"));
  const ProgramRun driver = plimsoll_command({"pause", std::to_string(interposed.pid()), "--ledger-dir", dir.path()});
  EXPECT_EQ(driver.status, 2);
  EXPECT_THAT(driver.err, HasSubstr("governed at the CUDA driver"));
  const ProgramRun no_answer =
      plimsoll_command({"resume", std::to_string(silent.pid()), "--timeout", "0.05", "--ledger-dir", dir.path()});
  EXPECT_EQ(no_answer.status, 2);
  EXPECT_THAT(no_answer.err, HasSubstr("did not answer the resume request within 50 ms"));
  EXPECT_THAT(no_answer.out, HasSubstr("no answer: no answer in time; the request was withdrawn"));
  const ProgramRun no_answer_json = plimsoll_command(
      {"pause", std::to_string(silent.pid()), "--timeout", "0.05", "--json", "--ledger-dir", dir.path()});
  EXPECT_EQ(no_answer_json.status, 2);
  const nlohmann::json timed_out = nlohmann::json::parse(no_answer_json.out);  // the answers so far, on stdout
  EXPECT_EQ(timed_out["done"], false);
  EXPECT_EQ(timed_out["gpus"][0]["uuid"], kUuid);
  EXPECT_EQ(timed_out["gpus"][0]["answered"], false);
  const ProgramRun bad_pid = plimsoll_command({"pause", "0", "--ledger-dir", dir.path()});
  EXPECT_NE(bad_pid.status, 0);
  EXPECT_THAT(bad_pid.err, HasSubstr("not a process id"));
}

}  // namespace
}  // namespace plimsoll
