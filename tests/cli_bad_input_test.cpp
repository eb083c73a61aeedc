// Usage errors name what to change, as the README promises for every command's bad input: a value the library's
// parsers refuse (a size, a growth policy, a device name, a shape, a dtype) names the option that gave it (the
// library's message says what the value should look like; cli::for_option), and a word that is not a command is
// named with the commands there are, and an unknown option with its command (cli::usage_failure_message).
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cli/option_values.hpp"
#include "cli_runner.hpp"
#include "plimsoll/error.hpp"
#include "plimsoll/size.hpp"

namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

using plimsoll::testing::CliRun;
using plimsoll::testing::run_plimsoll;

struct BadValue {
  std::string args;
  int status;            // 2 for every command; 125 for `plimsoll run`, whose other statuses are its program's
  std::string expected;  // the start of the message after "error: ": the option, then the parser's own words
};

TEST(CliBadInput, ForOptionPutsTheOptionBeforeTheParsersMessage) {
  try {
    plimsoll::cli::for_option("--budget", [] { return plimsoll::parse_size("lots"); });
    FAIL() << "parse_size accepted \"lots\"";
  } catch (const plimsoll::InvalidArgument& error) {
    EXPECT_THAT(std::string(error.what()), StartsWith("--budget: invalid size \"lots\""));
  }
  EXPECT_EQ(plimsoll::cli::for_option("--budget", [] { return plimsoll::parse_size("2KiB"); }), 2048u);
}

TEST(CliBadInput, EveryCommandNamesTheOptionOfAValueItCannotParse) {
  const std::string trace = std::string(PLIMSOLL_TRACES_DIR) + "/vgg16-b16.trace";
  const std::vector<BadValue> cases = {
      {"replay --policy fast " + trace, 2, "--policy: invalid growth \"fast\""},
      {"replay --compare preallocate,fast " + trace, 2, "--compare: invalid growth \"fast\""},
      {"replay --memory-limit lots " + trace, 2, "--memory-limit: invalid size \"lots\""},
      {"replay --device gpu0 " + trace, 2, "--device: invalid device \"gpu0\""},
      {"estimate batch --shape 2x --batch 2", 2, "--shape: invalid shape \"2x\""},
      {"estimate batch --shape 2x2 --batch 2 --dtype float8", 2, "--dtype: unknown dtype \"float8\""},
      {"estimate batch --shape 2x2 --batch 2 --budget lots", 2, "--budget: invalid size \"lots\""},
      {"estimate table --dtype int4", 2, "--dtype: unknown dtype \"int4\""},
      {"plan " + trace + " --allocator jax", 2, "--allocator: unknown allocator 'jax'"},
      {"train --memory-limit lots", 2, "--memory-limit: invalid size \"lots\""},
      {"train --device gpu0", 2, "--device: invalid device \"gpu0\""},
      {"run --memory-limit lots -- true", 125, "--memory-limit: invalid size \"lots\""},
      {"run --policy fast -- true", 125, "--policy: invalid growth \"fast\""},
      {"run --release-threshold lots -- true", 125, "--release-threshold: invalid size \"lots\""},
      {"run --device cpu=lots -- true", 125, "--device entry \"cpu=lots\": invalid size \"lots\""},
      {"run --device gpu=1GiB -- true", 125, "--device entry \"gpu=1GiB\": invalid device \"gpu\""},
      {"run --device cuda:0=lots -- true", 125, "--device: 'cuda:0=lots': the share is not a size"},
  };
  for (const BadValue& bad : cases) {
    SCOPED_TRACE(bad.args);
    const CliRun run = run_plimsoll(bad.args);
    EXPECT_EQ(run.status, bad.status);
    EXPECT_THAT(run.err, HasSubstr("error: " + bad.expected)) << run.err;
    EXPECT_TRUE(run.out.empty()) << run.out;
  }
}

TEST(CliBadInput, AWordThatIsNotACommandIsNamedWithTheCommandsThereAre) {
  const CliRun top = run_plimsoll("frobnicate");
  EXPECT_EQ(top.status, 2);
  EXPECT_THAT(top.err, HasSubstr("error: \"frobnicate\" is not a plimsoll command; give one of train, replay"));
  EXPECT_THAT(top.err, HasSubstr("(see plimsoll --help)"));
  const CliRun nested = run_plimsoll("estimate frob");
  EXPECT_EQ(nested.status, 2);
  EXPECT_THAT(nested.err, HasSubstr("error: \"frob\" is not a plimsoll estimate command; give one of batch, table"));
  // No word at all: CLI11's own message stands.
  const CliRun bare = run_plimsoll("");
  EXPECT_EQ(bare.status, 2);
  EXPECT_THAT(bare.err, HasSubstr("A subcommand is required"));
  const CliRun option_for_a_command = run_plimsoll("estimate --frob");
  EXPECT_EQ(option_for_a_command.status, 2);
  EXPECT_THAT(option_for_a_command.err,
              HasSubstr("error: plimsoll estimate has no option --frob; give one of its commands, batch, table"));
  // A `--` before the word is not taken for an option.
  const CliRun after_dashes = run_plimsoll("-- frobnicate");
  EXPECT_EQ(after_dashes.status, 2);
  EXPECT_THAT(after_dashes.err, HasSubstr("error: \"frobnicate\" is not a plimsoll command"));
  const CliRun only_dashes = run_plimsoll("--");
  EXPECT_EQ(only_dashes.status, 2);
  EXPECT_THAT(only_dashes.err, HasSubstr("A subcommand is required"));
}

// CLI11 lists the words it could not place in reverse order, with the `--` that ended run's options among them
// ("-- --bogus"); the message names the unknown option (or word) and the command instead.
TEST(CliBadInput, AnUnknownOptionOrWordIsNamedWithItsCommand) {
  const CliRun run = run_plimsoll("run --bogus -- true");
  EXPECT_EQ(run.status, 125);
  EXPECT_THAT(run.err, HasSubstr("error: plimsoll run has no option --bogus; see plimsoll run --help"));
  EXPECT_THAT(run.err, ::testing::Not(HasSubstr("-- --bogus")));
  const CliRun program_option = run_plimsoll("run python3 --version");
  EXPECT_EQ(program_option.status, 125);
  EXPECT_THAT(program_option.err, HasSubstr("has no option --version; see plimsoll run --help for the options it "
                                            "takes (put the program and its arguments after --)"));
  const CliRun replay = run_plimsoll("replay --bogus x");
  EXPECT_EQ(replay.status, 2);
  EXPECT_THAT(replay.err, HasSubstr("error: plimsoll replay has no option --bogus"));
  const CliRun devices = run_plimsoll("devices extra");
  EXPECT_EQ(devices.status, 2);
  EXPECT_THAT(devices.err, HasSubstr("error: plimsoll devices takes no argument \"extra\"; see plimsoll devices --help"));
}

}  // namespace
