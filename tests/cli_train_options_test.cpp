// `plimsoll train`'s numeric options (--epochs, --limit-batches, --batch-size, --nproc, --world-size, --threads,
// --devices, --workers, --timeout, --seed, --rank, --model-parallel, --micro-batches) given a bad value: bad input like every other option of the CLI, exit status 2
// and a message naming the option, the value and the fix, not CLI11's range message and its status 105. Checked
// before the job needs libtorch or data, so this runs in every build. Other commands' usage errors (CLI11's own
// checks, and values CLI11 cannot convert) exit 2 as well: CliUsageErrors.
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cli_runner.hpp"
#include "sharing_support.hpp"

namespace {

using plimsoll::testing::CliRun;
using plimsoll::testing::run_plimsoll;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(CliTrainOptions, BadCountsAreBadInputNamingTheOptionAndTheFix) {
  struct Case {
    const char* args;
    const char* message;
  };
  for (const Case& c : {Case{"--nproc 0", "--nproc 0 is too small; give --nproc a whole number of at least 1"},
                        Case{"--epochs 0", "--epochs 0 is too small; give --epochs a whole number of at least 1"},
                        Case{"--epochs -1", "--epochs -1 is negative; give --epochs a whole number of at least 1"},
                        Case{"--limit-batches 0", "--limit-batches 0 is too small"},
                        Case{"--batch-size 0", "--batch-size 0 is too small"},
                        Case{"--world-size 0", "--world-size 0 is too small"},
                        Case{"--nproc two", "--nproc \"two\" is not a whole number"},
                        Case{"--world-size 70000", "--world-size 70000: give at most 65535 processes"},
                        Case{"--threads -1", "--threads -1 is negative; give --threads a whole number of at least 1"},
                        Case{"--threads 0", "--threads 0 is too small; give --threads a whole number of at least 1"},
                        Case{"--threads 5000", "--threads 5000: give at most 4096 threads"},
                        Case{"--devices -1", "--devices -1 is negative; give --devices a whole number of at least 1"},
                        Case{"--workers many", "--workers \"many\" is not a whole number"},
                        Case{"--timeout 0", "--timeout 0 is too small; give --timeout a number above 0 to 86400"},
                        Case{"--timeout -5", "--timeout -5 is too small"},
                        Case{"--timeout inf", "--timeout inf is out of range"},
                        Case{"--timeout 1e9", "--timeout 1e9 is too large"},
                        Case{"--timeout soon", "--timeout \"soon\" is not a number"},
                        // CLI11 wrapped these into unsigned fields (--seed -1 was seed 2^64 - 1) or took them.
                        Case{"--seed -1", "--seed -1 is negative; give --seed a whole number of at least 0"},
                        Case{"--seed 18446744073709551616", "--seed 18446744073709551616 is 2^64 or more"},
                        Case{"--seed 1.5", "--seed \"1.5\" is not a whole number"},
                        Case{"--rank -1", "--rank -1 is negative; give --rank a whole number of at least 0"},
                        Case{"--rank 65535", "--rank 65535: give a rank below the job's --world-size"},
                        Case{"--model-parallel -1", "--model-parallel -1 is negative"},
                        Case{"--micro-batches -2", "--micro-batches -2 is negative"}}) {
    const CliRun run = run_plimsoll(std::string("train --quiet --data /nonexistent ") + c.args);
    EXPECT_EQ(run.status, 2) << c.args << ": " << run.err;
    EXPECT_THAT(run.err, HasSubstr(c.message)) << c.args;
    EXPECT_THAT(run.err, Not(HasSubstr("not in range"))) << c.args;
  }
}

TEST(CliTrainOptions, GoodCountsPassTheCheck) {
  // Past the counts, the run stops at the missing data (or at a build without libtorch): nothing about the counts.
  const CliRun run =
      run_plimsoll("train --quiet --data /nonexistent --epochs 1 --limit-batches 2 --batch-size 64 --world-size 1 "
                   "--threads 2 --devices 1 --workers 0 --timeout 0.5 --seed 18446744073709551615");
  EXPECT_EQ(run.status, 2) << run.err;
  EXPECT_THAT(run.err, HasSubstr("plimsoll: error: "));
  for (const char* option : {"--epochs", "--limit-batches", "--batch-size", "--world-size", "--threads", "--devices",
                             "--workers", "--timeout", "--seed"})
    EXPECT_THAT(run.err, Not(HasSubstr(option))) << run.err;
}

}  // namespace

namespace {

// Every command's options checked by CLI11 itself (a range, an unknown option, a missing argument, an unknown command): its message,
// and the status of any bad input, 2, whatever CLI11's own status for that error would be (105, 106, 109, 114, ...).
TEST(CliUsageErrors, EveryCommandsUsageErrorsExitTwo) {
  for (const char* args : {"plan --batch 0 x.trace", "replay --limit-over-live 0 x.trace", "top --interval 0",
                           "pause 1 --timeout 0", "replay --no-such-option x.trace", "pause",
                           "nosuchcommand"}) {
    const plimsoll::testing::CliRun run = plimsoll::testing::run_plimsoll(args);
    EXPECT_EQ(run.status, 2) << args << ": " << run.err;
    EXPECT_FALSE(run.err.empty()) << args;
  }
}

// The other commands' numeric options are checked by plimsoll too (plimsoll::parse_count, cli::parse_number): the
// message names the option, the value and the fix, where CLI11's range message named only the problem.
TEST(CliUsageErrors, BadNumbersNameTheOptionAndTheFix) {
  struct Case {
    const char* args;
    const char* message;
  };
  for (const Case& c :
       {Case{"plan --batch 0 x.trace", "--batch 0 is too small; give --batch a whole number of at least 1"},
        Case{"plan --batch two x.trace", "--batch \"two\" is not a whole number; give --batch a whole number"},
        Case{"replay --limit-over-live 0 x.trace",
             "--limit-over-live 0 is too small; give --limit-over-live a number above 0"},
        Case{"replay --limit-over-live lots x.trace", "--limit-over-live \"lots\" is not a number"},
        Case{"top --interval 0", "--interval 0 is too small; give --interval a number from 0.05 to 3600"},
        Case{"top --once --interval 5000", "--interval 5000 is too large; give --interval a number from 0.05 to 3600"},
        Case{"top --interval inf", "--interval inf is out of range"},
        Case{"top --interval +-5", "--interval \"+-5\" is not a number"},
        Case{"pause 1 --timeout 0", "--timeout 0 is too small; give --timeout a number from 0.01 to 3600"},
        Case{"resume 1 --timeout 2s", "--timeout \"2s\" is not a number; give --timeout a number from 0.01 to 3600"},
        Case{"plan --batch \"\" x.trace", "--batch is empty; give --batch a whole number of at least 1"},
        Case{"plan --fit --margin 1 x.trace",
             "--margin 1 is too large; give --margin a number of at least 0 and below 1"},
        Case{"plan --fit --margin -0.1 x.trace", "--margin -0.1 is too small"},
        Case{"plan --fit --margin lots x.trace", "--margin \"lots\" is not a number"},
        Case{"replay --memory-fraction 0 x.trace",
             "--memory-fraction 0 is too small; give --memory-fraction a number above 0 to 1"},
        Case{"replay --memory-fraction 1.5 x.trace", "--memory-fraction 1.5 is too large"},
        Case{"replay --memory-fraction most x.trace", "--memory-fraction \"most\" is not a number"},
        // Options CLI11 converts itself: the message says what the option takes, from its type.
        Case{"train --quiet --lr fast",
             "--lr \"fast\" is not a number; give --lr a number (see plimsoll train --help)"},
        Case{"train --quiet --rank first", "--rank \"first\" is not a whole number; give --rank a whole number"}}) {
    const CliRun run = run_plimsoll(c.args);
    EXPECT_EQ(run.status, 2) << c.args << ": " << run.err;
    EXPECT_THAT(run.err, HasSubstr(c.message)) << c.args;
    EXPECT_THAT(run.err, Not(HasSubstr("not in range"))) << c.args;
  }
}

TEST(CliUsageErrors, GoodNumbersPassTheCheck) {
  // An empty ledger directory: top prints its snapshot and exits 0.
  const plimsoll::testing::TempDirectory dir;  // its own: another test's ledger file would make top exit 1
  const CliRun run = run_plimsoll("top --once --interval 0.5 --ledger-dir " + dir.path());
  EXPECT_EQ(run.status, 0) << run.err;
  EXPECT_THAT(run.err, Not(HasSubstr("--interval")));

  // Good values pass to the next check: the missing trace.
  for (const char* args : {"plan --fit --margin 0.05 x.trace", "plan --batch 8 x.trace",
                           "replay --memory-fraction 0.5 x.trace", "replay --memory-fraction 1 x.trace"}) {
    const CliRun bad_trace = run_plimsoll(args);
    EXPECT_EQ(bad_trace.status, 2) << args << ": " << bad_trace.err;
    EXPECT_THAT(bad_trace.err, HasSubstr("x.trace: cannot open the trace")) << args;
  }
}

TEST(CliUsageErrors, HelpStillExitsZero) {
  const plimsoll::testing::CliRun run = plimsoll::testing::run_plimsoll("replay --help");
  EXPECT_EQ(run.status, 0) << run.err;
}

}  // namespace
