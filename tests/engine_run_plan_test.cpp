// Run plan files (engine/run_plan.hpp): a plan written and read back is the same plan, and every malformed file is
// refused with plimsoll::InvalidArgument naming the file, what is wrong and the fix.
#include "engine/run_plan.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "plimsoll/error.hpp"

namespace plimsoll::engine {
namespace {

class RunPlanFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("plimsoll_run_plan_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  std::string write_text(const std::string& name, const std::string& text) const {
    std::ofstream(path(name), std::ios::binary) << text;
    return path(name);
  }

  static std::string read_text(const std::string& file) {
    std::ifstream in(file, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  // A valid plan's text with one piece replaced (the header fields are written in a fixed order by the writer).
  std::string valid_text() const {
    write_run_plan(sample(), path("valid.plan"));
    return read_text(path("valid.plan"));
  }

  static RunPlan sample() {
    RunPlan plan;
    plan.granule = 2ull << 20;
    plan.limit = 8ull << 20;
    plan.through_step = 1;
    plan.source = "a \"quoted\" trace\\path.trace";
    plan.entries = {{1ull << 20, 0}, {256, 1ull << 20}, {3ull << 20, 2ull << 20}, {512, 0}};
    plan.covered_granules = count_covered_granules(plan.entries, plan.granule);
    for (const RunPlan::Entry& e : plan.entries) plan.fingerprint.push_back(e.size);
    return plan;
  }

  // Expects read_run_plan(file) to throw InvalidArgument whose message holds the file, every `parts` and the fix.
  static void expect_refused(const std::string& file, std::initializer_list<std::string> parts) {
    try {
      (void)read_run_plan(file);
      FAIL() << "read " << file << " without complaint";
    } catch (const InvalidArgument& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find(file), std::string::npos) << message;
      EXPECT_NE(message.find("plimsoll run-plan"), std::string::npos) << message;
      for (const std::string& part : parts) EXPECT_NE(message.find(part), std::string::npos) << message;
    }
  }

  std::string replaced(const std::string& from, const std::string& to) const {
    std::string text = valid_text();
    const std::size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return text.replace(at, from.size(), to);
  }

  std::filesystem::path dir_;
};

TEST_F(RunPlanFile, RoundTripKeepsEveryField) {
  const RunPlan plan = sample();
  EXPECT_EQ(plan.covered_granules, 3u);  // [0, 2 MiB) and [2, 5 MiB): granules 0, 1, 2
  write_run_plan(plan, path("p.plan"));
  const RunPlan back = read_run_plan(path("p.plan"));
  EXPECT_EQ(back.granule, plan.granule);
  EXPECT_EQ(back.limit, plan.limit);
  EXPECT_EQ(back.covered_granules, plan.covered_granules);
  EXPECT_EQ(back.through_step, plan.through_step);
  EXPECT_EQ(back.source, plan.source);
  EXPECT_EQ(back.fingerprint, plan.fingerprint);
  ASSERT_EQ(back.entries.size(), plan.entries.size());
  for (std::size_t i = 0; i < plan.entries.size(); ++i) {
    EXPECT_EQ(back.entries[i].size, plan.entries[i].size) << i;
    EXPECT_EQ(back.entries[i].offset, plan.entries[i].offset) << i;
  }
  // Nothing left beside it: the temporary file was renamed.
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& f : std::filesystem::directory_iterator(dir_)) ++files;
  EXPECT_EQ(files, 1u);
}

TEST_F(RunPlanFile, RoundTripOfAnEmptyPlanAndOfManyEntries) {
  RunPlan empty;
  write_run_plan(empty, path("empty.plan"));
  EXPECT_TRUE(read_run_plan(path("empty.plan")).entries.empty());

  RunPlan many;
  for (std::uint64_t i = 0; i < 100'000; ++i) many.entries.push_back({256 * (i % 7 + 1), 4096 * i});
  many.covered_granules = count_covered_granules(many.entries, many.granule);
  for (std::size_t i = 0; i < RunPlan::kFingerprint; ++i) many.fingerprint.push_back(many.entries[i].size);
  write_run_plan(many, path("many.plan"));
  const RunPlan back = read_run_plan(path("many.plan"));
  ASSERT_EQ(back.entries.size(), many.entries.size());
  EXPECT_EQ(back.entries.back().offset, many.entries.back().offset);
  EXPECT_EQ(back.covered_granules, many.covered_granules);
}

TEST_F(RunPlanFile, WriteReplacesAnOldPlanWhole) {
  write_text("p.plan", std::string(1 << 20, 'x'));
  write_run_plan(sample(), path("p.plan"));
  EXPECT_EQ(read_run_plan(path("p.plan")).entries.size(), sample().entries.size());
}

TEST_F(RunPlanFile, WriteToAMissingFolderNamesThePath) {
  const std::string target = path("no/such/folder/p.plan");
  try {
    write_run_plan(sample(), target);
    FAIL();
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find(target), std::string::npos) << error.what();
  }
}

TEST_F(RunPlanFile, MissingFileRefused) { expect_refused(path("absent.plan"), {"cannot be opened"}); }

TEST_F(RunPlanFile, NotJsonRefused) { expect_refused(write_text("p.plan", "granule = 2 MiB\n"), {"not JSON"}); }

TEST_F(RunPlanFile, JsonButNotAnObjectRefused) {
  expect_refused(write_text("p.plan", "[1, 2]"), {"not a run plan"});
}

TEST_F(RunPlanFile, TruncatedFileRefused) {
  const std::string text = valid_text();
  expect_refused(write_text("p.plan", text.substr(0, text.size() / 2)), {"truncated"});
}

TEST_F(RunPlanFile, WrongFormatNameRefused) {
  expect_refused(write_text("p.plan", replaced("\"plimsoll-run-plan\"", "\"plimsoll-trace\"")),
                 {"not a run plan", "plimsoll-trace"});
}

TEST_F(RunPlanFile, OtherVersionRefused) {
  expect_refused(write_text("p.plan", replaced("\"version\":1", "\"version\":2")), {"version 2", "version 1"});
}

TEST_F(RunPlanFile, BadGranuleRefused) {
  expect_refused(write_text("p.plan", replaced("\"granule\":2097152", "\"granule\":3000000")),
                 {"granule 3000000", "power of two"});
  expect_refused(write_text("p.plan", replaced("\"granule\":2097152", "\"granule\":\"2MiB\"")), {"granule"});
  expect_refused(write_text("p.plan", replaced("\"granule\":2097152", "\"granule\":0")), {"granule 0"});
}

TEST_F(RunPlanFile, MisalignedOffsetRefused) {
  expect_refused(write_text("p.plan", replaced("[256,1048576]", "[256,1048577]")),
                 {"entry 1", "offset 1048577", "multiple of 256"});
}

TEST_F(RunPlanFile, ZeroSizeRefused) {
  expect_refused(write_text("p.plan", replaced("[512,0]", "[0,0]")), {"entry 3", "size 0"});
}

TEST_F(RunPlanFile, SizeNotRoundedRefused) {
  expect_refused(write_text("p.plan", replaced("[256,1048576]", "[300,1048576]")), {"entry 1", "size 300", "rounded"});
}

TEST_F(RunPlanFile, EntryNotAPairRefused) {
  expect_refused(write_text("p.plan", replaced("[256,1048576]", "[256]")), {"entry 1", "[size, offset]"});
  expect_refused(write_text("p.plan", replaced("[256,1048576]", "[256,-256]")), {"entry 1"});
}

TEST_F(RunPlanFile, FingerprintLongerThanKFingerprintRefused) {
  std::string sizes = "[1048576";
  for (std::size_t i = 0; i < RunPlan::kFingerprint; ++i) sizes += ",256";
  sizes += "]";
  expect_refused(write_text("p.plan", replaced("[1048576,256,3145728,512]", sizes)), {"fingerprint", "65 sizes"});
}

TEST_F(RunPlanFile, FingerprintNotTheFirstSizesRefused) {
  expect_refused(write_text("p.plan", replaced("[1048576,256,3145728,512]", "[1048576,512,3145728,512]")),
                 {"fingerprint size 1", "entry 1"});
  expect_refused(write_text("p.plan", replaced("[1048576,256,3145728,512]", "[1048576,256]")),
                 {"fingerprint has 2 sizes"});
}

TEST_F(RunPlanFile, CoveredGranulesNotTheEntriesRefused) {
  expect_refused(write_text("p.plan", replaced("\"covered_granules\":3", "\"covered_granules\":2")),
                 {"covered_granules is 2", "cover 3"});
}

TEST_F(RunPlanFile, MissingHeaderFieldRefused) {
  expect_refused(write_text("p.plan", replaced("\"limit\":8388608,", "")), {"\"limit\""});
  expect_refused(write_text("p.plan", replaced("\"source\":", "\"origin\":")), {"source"});
}

TEST(RunPlanCoveredGranules, CountsTheUnionOfGranules) {
  const std::uint64_t g = 2ull << 20;
  EXPECT_EQ(count_covered_granules({}, g), 0u);
  EXPECT_EQ(count_covered_granules({{256, 0}, {256, g - 256}}, g), 1u);           // two in one granule
  EXPECT_EQ(count_covered_granules({{512, g - 256}}, g), 2u);                     // across a boundary
  EXPECT_EQ(count_covered_granules({{3 * g, 0}, {256, 5 * g}, {g, g}}, g), 4u);  // nested, and a gap
}

}  // namespace
}  // namespace plimsoll::engine
