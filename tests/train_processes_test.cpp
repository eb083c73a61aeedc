// `plimsoll train --nproc N` and ranks started by hand: data parallelism over processes with c10d's Gloo process
// group on the loopback address. Runs the built binary as a user would. Skipped without libtorch or Fashion-MNIST.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

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

class TrainProcesses : public plimsoll::testing::TrainRunTest {
 protected:
  void SetUp() override {
    TrainRunTest::SetUp();
    if (IsSkipped()) return;
    // One probe for the whole suite: a rank that cannot build its process group says so at once.
    static const bool has_gloo =
        run_plimsoll("train --quiet --rank 0 --world-size 2 --master 127.0.0.1:9 --timeout 0.1").err.find(
            "built without Gloo") == std::string::npos;
    if (!has_gloo) {
      GTEST_SKIP() << "this build has no Gloo headers: scripts/install-deps.sh installs libgloo-dev";
    }
  }

  // The pids the launcher reported starting ("started rank R of N (pid P)").
  static std::vector<int> started_pids(const std::string& err) {
    std::vector<int> pids;
    const std::regex started(R"(started rank \d+ of \d+ \(pid (\d+)\))");
    for (auto it = std::sregex_iterator(err.begin(), err.end(), started); it != std::sregex_iterator(); ++it) {
      pids.push_back(std::stoi((*it)[1].str()));
    }
    return pids;
  }

  static bool process_exists(int pid) { return ::kill(pid, 0) == 0 || errno != ESRCH; }
};

TEST_F(TrainProcesses, TwoProcessesTrainExactlyAsTwoInProcessReplicasAndStayIdenticalEveryStep) {
  const std::string common = "train --epochs 1 --limit-batches 20 --json --quiet";
  const CliRun in_process = run_plimsoll(common + " --devices 2");
  const CliRun processes = run_plimsoll(common + " --nproc 2 --verify-replicas");
  ASSERT_EQ(in_process.status, 0) << in_process.err;
  ASSERT_EQ(processes.status, 0) << processes.err;
  const nlohmann::json one = last_json(in_process);
  const nlohmann::json two = last_json(processes);
  // The same global batch, split the same way, gradients and batch-norm statistics averaged the same way: the
  // same model, up to the order of a floating-point sum.
  EXPECT_NEAR(two["epoch_results"][0]["train_loss"].get<double>(), one["epoch_results"][0]["train_loss"].get<double>(),
              1e-4);
  EXPECT_NEAR(two["test_accuracy"].get<double>(), one["test_accuracy"].get<double>(), 0.002);
  ASSERT_EQ(two["ranks"].size(), 2u);
  for (int rank = 0; rank < 2; ++rank) {
    const nlohmann::json& entry = two["ranks"][static_cast<std::size_t>(rank)];
    EXPECT_EQ(entry["rank"], rank);
    EXPECT_EQ(entry["device"], "cpu");
    EXPECT_GT(entry["peak_in_use_bytes"].get<std::uint64_t>(), 0u);
    EXPECT_GE(entry["peak_reserved_bytes"].get<std::uint64_t>(), entry["peak_in_use_bytes"].get<std::uint64_t>());
    EXPECT_EQ(entry["leak"], false);
    EXPECT_EQ(entry["replica_checks"], 20) << "every step's weights were compared across the ranks";
  }
  EXPECT_NE(two["ranks"][0]["pid"], two["ranks"][1]["pid"]);
}

TEST_F(TrainProcesses, DefaultEpochsInTwoProcessesReachEightyFivePercent) {
  const CliRun run = run_plimsoll("train --nproc 2 --json --quiet");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_GE(last_json(run)["test_accuracy"].get<double>(), 0.85);
}

// A port nobody listens on right now, on the loopback address.
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  ::close(fd);
  return ntohs(address.sin_port);
}

TEST_F(TrainProcesses, RanksStartedByHandWithTorchrunsVariablesOrFlagsFormOneJob) {
  // As on two machines: rank 1 from RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT in the background, rank 0 from flags.
  const int port = free_port();
  const std::string rank1 = "RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) + " " +
                            PLIMSOLL_CLI_PATH + " train --quiet --epochs 1 --limit-batches 5 >/dev/null 2>&1 & ";
  const CliRun run = run_plimsoll("train --quiet --epochs 1 --limit-batches 5 --json --rank 0 --world-size 2 --master "
                                  "127.0.0.1:" + std::to_string(port),
                                  rank1);
  ASSERT_EQ(run.status, 0) << run.err;
  const nlohmann::json report = last_json(run);
  ASSERT_EQ(report["ranks"].size(), 2u);
  EXPECT_EQ(report["ranks"][1]["rank"], 1);
}

TEST_F(TrainProcesses, HumanReportHasOneRowPerRank) {
  const CliRun run = run_plimsoll("train --nproc 2 --epochs 1 --limit-batches 5 --quiet");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("every rank (2 processes"));
  const std::regex row(R"(\n\s+[01]\s+\S+\s+\d+\s+cpu\s)");
  EXPECT_EQ(std::distance(std::sregex_iterator(run.out.begin(), run.out.end(), row), std::sregex_iterator()), 2)
      << run.out;
  // Rank 0 speaks for the job: one "created device" line, not one per rank.
  const std::regex created("plimsoll: created device");
  EXPECT_EQ(std::distance(std::sregex_iterator(run.err.begin(), run.err.end(), created), std::sregex_iterator()), 1)
      << run.err;
}

TEST_F(TrainProcesses, AKilledRankStopsTheJobNamingItAndLeavesNoProcessBehind) {
  for (const char* victim : {"1", "0"}) {
    const CliRun run = run_plimsoll("train --nproc 2 --epochs 1 --limit-batches 40 --timeout 20",
                                    std::string("PLIMSOLL_TRAIN_KILL_RANK_AT_STEP=") + victim + ":5");
    EXPECT_EQ(run.status, 128 + SIGKILL) << run.err;
    EXPECT_THAT(run.err, HasSubstr(std::string("rank ") + victim + " (pid"));
    EXPECT_THAT(run.err, HasSubstr("was killed by signal 9"));
    EXPECT_THAT(run.err, HasSubstr("lost contact with the other ranks")) << "the survivor says why it stopped";
    const std::vector<int> pids = started_pids(run.err);
    ASSERT_EQ(pids.size(), 2u) << run.err;
    for (int pid : pids) EXPECT_FALSE(process_exists(pid)) << "rank process " << pid << " outlived the job";
  }
}

TEST_F(TrainProcesses, OutOfMemoryOnARankEndsTheJobWithStatusThreeAndTheReasonOnEveryRank) {
  const CliRun run = run_plimsoll("train --nproc 2 --epochs 2 --limit-batches 10 --memory-limit 20MiB --timeout 20");
  EXPECT_EQ(run.status, 3) << run.err;
  EXPECT_THAT(run.err, HasSubstr("out of memory; the device's report:"));
  EXPECT_THAT(run.err, HasSubstr("plimsoll: out of memory on cpu"));
  // Both ranks make the same allocations, so the other rank may run out at the same step before the stop reaches
  // it (seen in CI at load): then it gives its own report. Either way every rank says why it stopped.
  const auto count = [&](const std::string& text) {
    std::size_t n = 0;
    for (std::size_t at = run.err.find(text); at != std::string::npos; at = run.err.find(text, at + 1)) ++n;
    return n;
  };
  const bool other_named_it = count("stopping: rank ") > 0;
  EXPECT_TRUE(other_named_it || count("out of memory; the device's report:") == 2)
      << "the other rank names the one that failed, or ran out of memory itself\n" << run.err;
  if (other_named_it) {
    EXPECT_THAT(run.err, HasSubstr("ran out of memory at step"));
  }
  for (int pid : started_pids(run.err)) EXPECT_FALSE(process_exists(pid));
}

TEST_F(TrainProcesses, ARankWhoseOthersNeverComeGivesUpAfterTheTimeout) {
  // Nobody serves port 9 (discard) on the loopback address: rank 1 cannot join and must not hang.
  const CliRun run = run_plimsoll("train --quiet --rank 1 --world-size 2 --master 127.0.0.1:9 --timeout 2");
  EXPECT_EQ(run.status, 5) << run.err;
  EXPECT_THAT(run.err, HasSubstr("could not join the group at 127.0.0.1:9"));
}

TEST_F(TrainProcesses, BadOptionsNameTheProblemAndTheFix) {
  const CliRun both = run_plimsoll("train --quiet --nproc 2 --devices 2");
  EXPECT_EQ(both.status, 2);
  EXPECT_THAT(both.err, HasSubstr("use --nproc alone, or --devices alone"));

  const CliRun nested = run_plimsoll("train --quiet --nproc 2", "RANK=0 WORLD_SIZE=2");
  EXPECT_EQ(nested.status, 2);
  EXPECT_THAT(nested.err, HasSubstr("drop --nproc and give --rank"));

  const CliRun no_master = run_plimsoll("train --quiet --rank 0 --world-size 2", "env -u MASTER_ADDR -u MASTER_PORT");
  EXPECT_EQ(no_master.status, 2);
  EXPECT_THAT(no_master.err, HasSubstr("give --master HOST:PORT"));

  const CliRun bad_master = run_plimsoll("train --quiet --rank 0 --world-size 2 --master nowhere");
  EXPECT_EQ(bad_master.status, 2);
  EXPECT_THAT(bad_master.err, HasSubstr("--master nowhere: give HOST:PORT"));

  const CliRun bad_rank = run_plimsoll("train --quiet --rank 2 --world-size 2 --master 127.0.0.1:29500");
  EXPECT_EQ(bad_rank.status, 2);
  EXPECT_THAT(bad_rank.err, HasSubstr("rank 2 of a world of 2"));

  const CliRun bad_env = run_plimsoll("train --quiet", "RANK=one WORLD_SIZE=2");
  EXPECT_EQ(bad_env.status, 2);
  EXPECT_THAT(bad_env.err, HasSubstr("RANK=one: give a whole number"));
}

}  // namespace
