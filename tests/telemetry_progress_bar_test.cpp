// The replay progress bar, driven by a fake clock: what a line shows, how often it is redrawn, and that it
// leaves the terminal clean.
#include <algorithm>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "telemetry/terminal/progress_bar.hpp"

namespace plimsoll::telemetry {
namespace {

using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr const char* kErase = "\r\033[K";

TEST(TelemetryProgressBar, LineShowsPercentCountsRateAndEta) {
  // 420 of 1000 events in 2 s: 210 events/s, 580 left, about 2.8 s to go.
  const std::string line = progress_line("resnet.trace on_demand", 420, 1000, 2.0, 100);
  EXPECT_THAT(line, StartsWith("resnet.trace on_demand ["));
  EXPECT_THAT(line, HasSubstr(" 42%"));
  EXPECT_THAT(line, HasSubstr("420/1k events"));
  EXPECT_THAT(line, HasSubstr("210/s"));
  EXPECT_THAT(line, HasSubstr("ETA 0:03"));
  EXPECT_LT(line.size(), 100u);
  // The bar keeps its place while the numbers change.
  EXPECT_EQ(line.find(']'), progress_line("resnet.trace on_demand", 1, 1000, 0.001, 100).find(']'));
}

TEST(TelemetryProgressBar, BarFillsInProportion) {
  const auto filled = [](const std::string& line) { return std::count(line.begin(), line.end(), '#'); };
  const std::string empty = progress_line("x", 0, 1000, 1.0, 80);
  const std::string half = progress_line("x", 500, 1000, 1.0, 80);
  const std::string full = progress_line("x", 1000, 1000, 1.0, 80);
  const auto cells = static_cast<long>(full.find(']') - full.find('[') - 1);
  EXPECT_EQ(filled(empty), 0);
  EXPECT_EQ(filled(half), cells / 2);
  EXPECT_EQ(filled(full), cells);
  EXPECT_THAT(full, HasSubstr("100%"));
  EXPECT_THAT(full, HasSubstr("ETA 0:00"));
}

TEST(TelemetryProgressBar, LongEtasShowHours) {
  EXPECT_THAT(progress_line("x", 1, 10000, 1.0, 80), HasSubstr("ETA 2:46:39"));
}

TEST(TelemetryProgressBar, UnknownRateIsShownAsDashes) {
  const std::string line = progress_line("x", 0, 1000, 0.0, 80);
  EXPECT_THAT(line, HasSubstr("--/s"));
  EXPECT_THAT(line, HasSubstr("ETA --:--"));
  EXPECT_THAT(line, HasSubstr("  0%"));
}

TEST(TelemetryProgressBar, ALongLabelIsCutToFitTheTerminal) {
  const std::string label(200, 'L');
  const std::string line = progress_line(label, 5'000'000, 10'000'000, 3.0, 80);
  EXPECT_LT(line.size(), 80u);
  EXPECT_THAT(line, HasSubstr("5M/10M events"));
  EXPECT_THAT(line, HasSubstr("50%"));
}

struct FakeTerminal {
  double now = 100;
  std::vector<std::string> writes;
};

TEST(TelemetryProgressBar, ShortReplaysDrawNothing) {
  FakeTerminal terminal;
  {
    ProgressBar bar("t", 1000, [&](std::string_view text) { terminal.writes.emplace_back(text); },
                    [&] { return terminal.now; }, {.first_draw_after_s = 0.5, .redraw_every_s = 0.1, .width = 80});
    terminal.now += 0.2;
    bar.update(500);
    terminal.now += 0.2;
    bar.update(1000);
    bar.finish();
  }
  EXPECT_TRUE(terminal.writes.empty());
}

TEST(TelemetryProgressBar, RedrawsAtMostTenTimesASecondAndErasesAtTheEnd) {
  FakeTerminal terminal;
  ProgressBar bar("t", 1'000'000, [&](std::string_view text) { terminal.writes.emplace_back(text); },
                  [&] { return terminal.now; }, {.first_draw_after_s = 0.5, .redraw_every_s = 0.1, .width = 80});
  terminal.now += 0.6;
  for (std::size_t done = 0; done < 1000; ++done) bar.update(done);  // all at one instant
  EXPECT_EQ(bar.draws(), 1u);
  // Two seconds of updates every millisecond: about 20 redraws, not 2000.
  for (std::size_t tick = 0; tick < 2000; ++tick) {
    terminal.now += 0.001;
    bar.update(1000 + tick * 100);
  }
  EXPECT_GE(bar.draws(), 18u);
  EXPECT_LE(bar.draws(), 22u);
  for (const std::string& write : terminal.writes) {
    EXPECT_THAT(write, StartsWith(kErase));  // each redraw replaces the line in place
    EXPECT_EQ(write.find('\n'), std::string::npos);
  }
  EXPECT_THAT(terminal.writes.back(), HasSubstr("%"));
  bar.finish();
  EXPECT_EQ(terminal.writes.back(), kErase);
  const std::size_t writes = terminal.writes.size();
  terminal.now += 1;
  bar.update(1'000'000);
  bar.finish();
  EXPECT_EQ(terminal.writes.size(), writes) << "nothing after finish";
}

TEST(TelemetryProgressBar, DestructorErasesADrawnBar) {
  FakeTerminal terminal;
  {
    ProgressBar bar("t", 10, [&](std::string_view text) { terminal.writes.emplace_back(text); },
                    [&] { return terminal.now; }, {.first_draw_after_s = 0, .redraw_every_s = 0.1, .width = 80});
    bar.update(3);
  }
  ASSERT_EQ(terminal.writes.size(), 2u);
  EXPECT_THAT(terminal.writes[0], HasSubstr("3/10 events"));
  EXPECT_EQ(terminal.writes[1], kErase);
}

TEST(TelemetryProgressBar, StderrColumnsFallsBackWhenNotATerminal) {
  if (stderr_is_terminal()) GTEST_SKIP() << "stderr is a terminal here; the fallback is for pipes";
  EXPECT_EQ(stderr_columns(123), 123u);
}

}  // namespace
}  // namespace plimsoll::telemetry
