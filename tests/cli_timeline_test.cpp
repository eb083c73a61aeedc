// `plimsoll replay --plot/--html/--chrome-trace` as a user runs it, and the HTML page opened in a real browser
// (headless Chromium) to check that its script builds the charts without an error.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_runner.hpp"

namespace {

using ::testing::HasSubstr;
using ::testing::Not;

using plimsoll::testing::CliRun;
using plimsoll::testing::read_text_file;
using plimsoll::testing::run_plimsoll;

constexpr const char* kChromium = "/usr/bin/chromium";

std::string trace_path(const std::string& file) { return std::string(PLIMSOLL_TRACES_DIR) + "/" + file; }

// A file name unique to the running test: ctest runs tests in parallel processes.
std::string temp_path(const std::string& suffix) {
  return ::testing::TempDir() + "plimsoll_timeline_" +
         ::testing::UnitTest::GetInstance()->current_test_info()->name() + suffix;
}

std::size_t count_of(const std::string& text, const std::string& part) {
  std::size_t count = 0;
  for (std::size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++count;
  return count;
}

// ResNet-18 at batch 128 peaks near 800 MiB live: a 700 MiB limit runs out of memory during step 0.
const std::string kOomRun = trace_path("resnet18-b128-sgd.trace") + " --memory-limit 700MiB";

TEST(CliTimeline, WritesAChartPerPolicyInEachFormat) {
  const std::string svg = temp_path(".svg"), html = temp_path(".html"), json = temp_path(".json");
  const CliRun run = run_plimsoll("replay " + kOomRun + " --compare preallocate,on_demand --plot " + svg +
                                  " --html " + html + " --chrome-trace " + json);
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("memory timeline: " + svg));
  EXPECT_THAT(run.out, HasSubstr("memory timeline: " + json));

  const std::string svg_text = read_text_file(svg);
  EXPECT_EQ(count_of(svg_text, R"(class="plimsoll-timeline")"), 2u);
  EXPECT_EQ(count_of(svg_text, R"(<line class="oom")"), 2u);
  EXPECT_EQ(count_of(svg_text, R"(<rect class="step")"), 2u);  // the OOM comes in step 0
  EXPECT_THAT(svg_text, HasSubstr("preallocate on sim:16GiB"));
  EXPECT_THAT(svg_text, HasSubstr("on_demand on sim:16GiB"));

  const std::string html_text = read_text_file(html);
  EXPECT_EQ(count_of(html_text, R"(<div class="chart")"), 2u);

  const nlohmann::json trace = nlohmann::json::parse(read_text_file(json));
  std::size_t processes = 0, ooms = 0, counters = 0;
  for (const nlohmann::json& event : trace.at("traceEvents")) {
    if (event["name"] == "process_name") ++processes;
    if (event["ph"] == "i" && event["cat"] == "oom") ++ooms;
    if (event["ph"] == "C") ++counters;
  }
  EXPECT_EQ(processes, 2u);
  EXPECT_EQ(ooms, 2u);
  EXPECT_GT(counters, 100u);
}

TEST(CliTimeline, SeveralTracesGiveOneChartEach) {
  const std::string svg = temp_path(".svg");
  const CliRun run = run_plimsoll("replay --json " + trace_path("gpt-6-512-b8.trace") + " " +
                                  trace_path("vgg16-b16.trace") + " --plot " + svg);
  ASSERT_EQ(run.status, 0) << run.err;
  const std::string svg_text = read_text_file(svg);
  EXPECT_EQ(count_of(svg_text, R"(class="plimsoll-timeline")"), 2u);
  EXPECT_THAT(svg_text, HasSubstr(">gpt-6-512-b8.trace<"));
  EXPECT_THAT(svg_text, HasSubstr(">vgg16-b16.trace<"));
  // --json keeps stdout to JSON lines only.
  EXPECT_THAT(run.out, Not(HasSubstr("memory timeline")));
}

TEST(CliTimeline, AnUnwritableOutputFailsBeforeAnyWork) {
  // The trace does not exist either: the output path is checked first, so its error is the one reported.
  const std::string missing_trace = "/no/such/trace.trace";
  const CliRun missing_folder =
      run_plimsoll("replay " + missing_trace + " --plot " + ::testing::TempDir() + "no-such-folder/chart.svg");
  EXPECT_EQ(missing_folder.status, 2);
  EXPECT_THAT(missing_folder.err, HasSubstr("cannot write --plot"));
  EXPECT_THAT(missing_folder.err, HasSubstr("no-such-folder"));
  EXPECT_THAT(missing_folder.err, HasSubstr("does not exist"));
  EXPECT_TRUE(missing_folder.out.empty());

  const CliRun a_folder = run_plimsoll("replay " + missing_trace + " --html " + ::testing::TempDir());
  EXPECT_EQ(a_folder.status, 2);
  EXPECT_THAT(a_folder.err, HasSubstr("cannot write --html"));
  EXPECT_THAT(a_folder.err, HasSubstr("it is a folder"));

  const CliRun not_a_folder =
      run_plimsoll("replay " + missing_trace + " --chrome-trace " + trace_path("README.md") + "/trace.json");
  EXPECT_EQ(not_a_folder.status, 2);
  EXPECT_THAT(not_a_folder.err, HasSubstr("cannot write --chrome-trace"));
  EXPECT_THAT(not_a_folder.err, HasSubstr("is not a folder"));
}

TEST(CliTimeline, HelpListsTheTimelineOptions) {
  const CliRun run = run_plimsoll("replay --help");
  EXPECT_THAT(run.out, HasSubstr("--plot"));
  EXPECT_THAT(run.out, HasSubstr("--html"));
  EXPECT_THAT(run.out, HasSubstr("--chrome-trace"));
  EXPECT_THAT(run.out, HasSubstr("Perfetto"));
}

struct Browser {
  int status = -1;
  std::string dom;
  std::string log;
};

// Opens `url` in headless Chromium and returns the DOM after the page's scripts ran, and Chromium's log, where
// console messages and uncaught exceptions appear.
Browser open_in_chromium(const std::string& url) {
  const std::string log_path = temp_path(".chromium.log");
  const std::string profile = temp_path(".profile");
  const std::string command = std::string("HOME=") + ::testing::TempDir() + " timeout 60 " + kChromium +
                              " --headless --no-sandbox --disable-gpu --enable-logging=stderr --v=0 --user-data-dir=" +
                              profile + " --dump-dom '" + url + "' 2>" + log_path;
  Browser browser;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    ADD_FAILURE() << "popen failed for " << command;
    return browser;
  }
  std::array<char, 4096> buffer{};
  std::size_t got = 0;
  while ((got = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) browser.dom.append(buffer.data(), got);
  const int wait_status = pclose(pipe);
  browser.status = WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : -1;
  browser.log = read_text_file(log_path);
  std::error_code ignored;
  std::filesystem::remove_all(profile, ignored);
  return browser;
}

void expect_no_script_error(const Browser& browser) {
  EXPECT_THAT(browser.log, Not(HasSubstr("Uncaught")));
  EXPECT_THAT(browser.log, Not(HasSubstr(":CONSOLE(")));  // the page logs nothing when all is well
  EXPECT_THAT(browser.dom, Not(HasSubstr(R"(id="plimsoll-error")")));
}

TEST(CliTimeline, HtmlPageBuildsItsChartsInABrowserWithoutErrors) {
  if (!std::filesystem::exists(kChromium)) GTEST_SKIP() << kChromium << " is missing (Debian package chromium)";
  const std::string html = temp_path(".html");
  const CliRun run =
      run_plimsoll("replay " + kOomRun + " --compare preallocate,on_demand --html " + html);
  ASSERT_EQ(run.status, 0) << run.err;

  // Opened zoomed in on events 1000-2000 through the address, so the zoom code runs too.
  const Browser browser = open_in_chromium("file://" + html + "#zoom=1000,2000");
  ASSERT_EQ(browser.status, 0) << browser.log;
  expect_no_script_error(browser);
  EXPECT_THAT(browser.dom, HasSubstr(R"(id="plimsoll-ready")"));
  EXPECT_EQ(count_of(browser.dom, R"(class="plimsoll-timeline")"), 2u);
  EXPECT_EQ(count_of(browser.dom, R"(<path class="in-use")"), 2u);
  EXPECT_EQ(count_of(browser.dom, R"(<path class="reserved")"), 2u);
  EXPECT_EQ(count_of(browser.dom, R"(<line class="oom")"), 2u);
  // Elements only the script adds: the hover layer, and the zoomed view it applied.
  EXPECT_EQ(count_of(browser.dom, R"(class="hover-area")"), 2u);
  EXPECT_EQ(count_of(browser.dom, R"(class="hover-line")"), 2u);
  EXPECT_EQ(count_of(browser.dom, R"(data-domain="1000 2000")"), 2u);
  EXPECT_EQ(count_of(browser.dom, R"(transform="matrix()"), 2u);
  // The x axis was labelled again for the zoomed view: ticks every 200 events.
  EXPECT_THAT(browser.dom, HasSubstr(">1.2k</text>"));
}

// The check above must be able to fail: a page with a broken script is caught by it.
TEST(CliTimeline, TheBrowserCheckSeesAScriptError) {
  if (!std::filesystem::exists(kChromium)) GTEST_SKIP() << kChromium << " is missing (Debian package chromium)";
  const std::string html = temp_path(".html");
  std::ofstream(html) << "<!DOCTYPE html><html><body><script>no_such_function();</script></body></html>\n";
  const Browser browser = open_in_chromium("file://" + html);
  EXPECT_THAT(browser.log, HasSubstr("Uncaught"));
}

}  // namespace
