// The docs name what the command does: every option each subcommand's --help lists is on that command's page, and
// every key its --json prints is in the page's key list. An option or key added without its doc line fails here.
#include <cctype>
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_runner.hpp"
#include "train_requirements.hpp"

namespace {

using plimsoll::testing::CliRun;
using plimsoll::testing::lines_of;
using plimsoll::testing::read_text_file;
using plimsoll::testing::run_plimsoll;

std::string page(const std::string& relative) {
  const std::string text = read_text_file(std::string(PLIMSOLL_SOURCE_DIR) + "/" + relative);
  EXPECT_FALSE(text.empty()) << relative << " is missing or empty";
  return text;
}

// The options a --help lists: the words starting with "--" at the start of its option lines.
std::vector<std::string> options_in_help(const std::string& help) {
  std::vector<std::string> options;
  const std::regex option_line(R"(^\s+(-h,)?(--[a-z][a-z-]*))");
  for (const std::string& line : lines_of(help)) {
    std::smatch match;
    if (std::regex_search(line, match, option_line) && match[2] != "--help") options.push_back(match[2]);
  }
  return options;
}

// Whether `text` names `option` as itself: "--batch" is not named by "--batch-size" or "--batch-of".
bool names_option(const std::string& text, const std::string& option) {
  for (std::size_t at = text.find(option); at != std::string::npos; at = text.find(option, at + 1)) {
    const std::size_t end = at + option.size();
    if (end == text.size() || !(std::isalnum(static_cast<unsigned char>(text[end])) || text[end] == '-')) return true;
  }
  return false;
}

// Every key of `object`, and of the objects in it and in its arrays, as `key`.
void collect_keys(const nlohmann::json& value, std::set<std::string>& keys) {
  if (value.is_object()) {
    for (const auto& item : value.items()) {
      keys.insert(item.key());
      collect_keys(item.value(), keys);
    }
  } else if (value.is_array()) {
    for (const auto& item : value) collect_keys(item, keys);
  }
}

void expect_keys_documented(const nlohmann::json& printed, const std::string& relative) {
  const std::string text = page(relative);
  std::set<std::string> keys;
  collect_keys(printed, keys);
  ASSERT_FALSE(keys.empty());
  for (const std::string& key : keys) {
    EXPECT_TRUE(text.find("`" + key + "`") != std::string::npos) << relative << " does not list the key " << key;
  }
}

TEST(CliDocs, EveryOptionOfEveryCommandIsOnItsPage) {
  struct Command {
    std::string args;
    std::string page;
  };
  const std::vector<Command> commands = {
      {"train", "docs/train.md"},       {"replay", "docs/replay.md"},       {"devices", "README.md"},
      {"leaks", "docs/leaks.md"},       {"estimate batch", "docs/estimate.md"}, {"estimate table", "docs/estimate.md"},
      {"plan", "docs/plan.md"},         {"top", "docs/sharing.md"},         {"pause", "docs/sharing.md"},
      {"resume", "docs/sharing.md"},    {"run", "docs/python.md"},          {"run-plan", "docs/run-plans.md"},
  };
  for (const Command& command : commands) {
    SCOPED_TRACE(command.args);
    const CliRun help = run_plimsoll(command.args + " --help");
    ASSERT_EQ(help.status, 0) << help.err;
    const std::vector<std::string> options = options_in_help(help.out);
    EXPECT_FALSE(options.empty()) << help.out;
    const std::string text = page(command.page);
    for (const std::string& option : options) {
      EXPECT_TRUE(names_option(text, option)) << command.page << " does not name " << command.args << " " << option;
    }
  }
}

TEST(CliDocs, TheCheckSeesAnOptionThatIsMissing) {
  EXPECT_TRUE(names_option("`--batch-size N` and `--batch N`", "--batch"));
  EXPECT_FALSE(names_option("`--batch-size N` and `--batch-of T=N`", "--batch"));
  EXPECT_EQ(options_in_help("Options:\n  -h,--help  Print\n  --json  One object\n  --shape SHAPE REQUIRED  x\n"),
            (std::vector<std::string>{"--json", "--shape"}));
}

TEST(CliDocs, EveryJsonKeyIsListedOnItsPage) {
  const std::string trace = std::string(PLIMSOLL_TRACES_DIR) + "/leak-retained-batches-resnet18.trace";

  const CliRun replay = run_plimsoll("replay " + trace + " --json");
  ASSERT_EQ(replay.status, 0) << replay.err;
  expect_keys_documented(nlohmann::json::parse(lines_of(replay.out).front()), "docs/replay.md");

  const CliRun leaks = run_plimsoll("leaks " + trace + " --json");
  ASSERT_EQ(leaks.status, 0) << leaks.err;
  expect_keys_documented(nlohmann::json::parse(leaks.out), "docs/leaks.md");

  const CliRun estimate = run_plimsoll("estimate batch --shape 224x224x3 --batch 128 --budget 8GiB --json");
  ASSERT_EQ(estimate.status, 0) << estimate.err;
  expect_keys_documented(nlohmann::json::parse(estimate.out), "docs/estimate.md");

  const CliRun devices = run_plimsoll("devices --json");
  ASSERT_EQ(devices.status, 0) << devices.err;
  expect_keys_documented(nlohmann::json::parse(devices.out), "README.md");

  // A constructed trace: packing a shared one takes seconds to minutes.
  const std::string small = ::testing::TempDir() + "cli_docs_run_plan.trace";
  {
    std::ofstream(small) << "# step 0 begin\na 1 1048576\na 2 2097152\nf 2\n# step 0 end\nf 1\n";
  }
  const CliRun run_plan = run_plimsoll("run-plan " + small + " -o " + small + ".plan --json");
  ASSERT_EQ(run_plan.status, 0) << run_plan.err;
  expect_keys_documented(nlohmann::json::parse(run_plan.out), "docs/run-plans.md");
}

// The main job's keys, on a two-stage run of two steps (its model_parallel object included): needs libtorch.
TEST(CliDocs, EveryTrainJsonKeyIsListedInTrainMd) {
  if (const std::string why = plimsoll::testing::why_train_cannot_run(); !why.empty()) GTEST_SKIP() << why;
  const CliRun train = run_plimsoll("train --epochs 1 --limit-batches 2 --model-parallel 2 --json --quiet");
  ASSERT_EQ(train.status, 0) << train.err;
  expect_keys_documented(nlohmann::json::parse(lines_of(train.out).back()), "docs/train.md");
}

}  // namespace
