// Memory timelines of replays: the recorder's bucketing (no peak lost), where a timeline ends, its steps, marks
// and per-tag areas, and the three ways it is written out (SVG, HTML, Trace Event JSON).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "plimsoll/runtime.hpp"
#include "policy_builder.hpp"
#include "plimsoll/trace.hpp"
#include "telemetry/render/chrome_trace.hpp"
#include "telemetry/replay/replay.hpp"
#include "telemetry/replay/timeline.hpp"
#include "telemetry/render/timeline_axis.hpp"
#include "telemetry/render/timeline_html.hpp"
#include "telemetry/render/timeline_svg.hpp"

namespace plimsoll::telemetry {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;

Timeline replay_timeline(const Trace& trace, std::uint64_t limit, std::size_t buckets = kDefaultTimelineBuckets) {
  Runtime runtime(quiet_config(Growth::on_demand, limit));
  TimelineRecorder recorder(trace, buckets);
  const ReplayResult result = replay(trace, runtime.device("sim:1GiB"), {.timeline = &recorder});
  return recorder.finish(result);
}

// "a i 64 / f i" pairs: `pairs` * 2 events, for tests that feed the recorder their own memory numbers.
Trace flat_trace(std::size_t pairs) {
  std::string text;
  for (std::size_t id = 1; id <= pairs; ++id) text += "a " + std::to_string(id) + " 64\nf " + std::to_string(id) + "\n";
  return parse_trace(text, "flat.trace");
}

// Steps, a plain marker, and a block per step; step 1 needs 6 MiB on top of 3 MiB held.
const char* const kStepTrace =
    "a 1 3145728\n"         // 0
    "# model tiny <net>\n"  // 1
    "# step 0 begin\n"      // 2
    "a 2 1048576\n"         // 3
    "f 2\n"                 // 4
    "# step 0 end\n"        // 5
    "# step 1 begin\n"      // 6
    "a 3 6291456\n"         // 7
    "f 3\n"                 // 8
    "# step 1 end\n"        // 9
    "f 1\n";                // 10

TEST(TelemetryTimeline, BucketingKeepsEveryPeakAndLow) {
  const Trace trace = flat_trace(5000);
  TimelineRecorder recorder(trace, 20);
  std::mt19937_64 random(7);
  std::uint64_t highest_in_use = 0, highest_reserved = 0, lowest_in_use = UINT64_MAX;
  std::size_t highest_at = 0;
  for (std::size_t index = 0; index < trace.events.size(); ++index) {
    std::uint64_t in_use = random() % (100 * kMiB);
    if (index == 7777) in_use = 500 * kMiB;  // one sharp spike, one event wide
    const std::uint64_t reserved = in_use + random() % kMiB;
    if (in_use > highest_in_use) highest_at = index;
    highest_in_use = std::max(highest_in_use, in_use);
    highest_reserved = std::max(highest_reserved, reserved);
    lowest_in_use = std::min(lowest_in_use, in_use);
    recorder.record(index, in_use, reserved);
  }
  ReplayResult result;
  result.device = "sim:1GiB";
  result.policy = "on_demand";
  const Timeline timeline = recorder.finish(result);

  EXPECT_EQ(timeline.peak_in_use(), highest_in_use);
  EXPECT_EQ(timeline.peak_reserved(), highest_reserved);
  EXPECT_EQ(highest_at, 7777u);
  const auto spike = std::find_if(timeline.samples.begin(), timeline.samples.end(),
                                  [](const TimelineSample& sample) { return sample.event == 7777; });
  ASSERT_NE(spike, timeline.samples.end());
  EXPECT_EQ(spike->in_use_bytes, 500 * kMiB);
  EXPECT_TRUE(std::any_of(timeline.samples.begin(), timeline.samples.end(),
                          [&](const TimelineSample& sample) { return sample.in_use_bytes == lowest_in_use; }));
  // At most 4 samples per bucket plus the last event, in event order without repeats.
  EXPECT_LE(timeline.samples.size(), 20u * 4 + 1);
  EXPECT_GE(timeline.samples.size(), 20u * 2);
  for (std::size_t i = 1; i < timeline.samples.size(); ++i) {
    EXPECT_LT(timeline.samples[i - 1].event, timeline.samples[i].event);
  }
  EXPECT_EQ(timeline.samples.back().event, trace.events.size() - 1);
  EXPECT_EQ(timeline.events, trace.events.size());
  EXPECT_EQ(timeline.end_x, trace.events.size() - 1);
  EXPECT_FALSE(timeline.oom.has_value());
}

TEST(TelemetryTimeline, AShortTraceKeepsEverySample) {
  const Trace trace = parse_trace(kStepTrace, "steps.trace");
  const Timeline timeline = replay_timeline(trace, 64 * kMiB);
  ASSERT_EQ(timeline.samples.size(), trace.events.size());
  EXPECT_EQ(timeline.samples[0].in_use_bytes, 3 * kMiB);
  EXPECT_EQ(timeline.samples[7].in_use_bytes, 9 * kMiB);
  EXPECT_EQ(timeline.samples[8].in_use_bytes, 3 * kMiB);
  EXPECT_EQ(timeline.samples[10].in_use_bytes, 0u);
  for (const TimelineSample& sample : timeline.samples) EXPECT_GE(sample.reserved_bytes, sample.in_use_bytes);
  EXPECT_EQ(timeline.peak_in_use(), 9 * kMiB);
  EXPECT_EQ(timeline.trace, "steps.trace");
  EXPECT_EQ(timeline.policy, "on_demand");
  EXPECT_FALSE(timeline.has_times);
}

TEST(TelemetryTimeline, StepsAndMarkersComeFromTheTrace) {
  const Trace trace = parse_trace(kStepTrace, "steps.trace");
  const Timeline timeline = replay_timeline(trace, 64 * kMiB);

  ASSERT_EQ(timeline.steps.size(), 2u);
  EXPECT_EQ(timeline.steps[0].number, 0);
  EXPECT_EQ(timeline.steps[0].begin_x, 3u);
  EXPECT_EQ(timeline.steps[0].end_x, 5u);
  EXPECT_EQ(timeline.steps[1].begin_x, 7u);
  EXPECT_EQ(timeline.steps[1].end_x, 9u);
  // The step markers are drawn as steps; only the other marker is a mark.
  ASSERT_EQ(timeline.marks.size(), 1u);
  EXPECT_EQ(timeline.marks[0].kind, TimelineMark::Kind::marker);
  EXPECT_EQ(timeline.marks[0].label, "model tiny <net>");
  EXPECT_EQ(timeline.marks[0].x, 1u);
  EXPECT_EQ(timeline.samples[0].step, -1);
  EXPECT_EQ(timeline.samples[3].step, 0);
  EXPECT_EQ(timeline.samples[7].step, 1);
  EXPECT_EQ(timeline.samples[10].step, -1);
}

TEST(TelemetryTimeline, AnOutOfMemoryEndsTheTimeline) {
  const Trace trace = parse_trace(kStepTrace, "steps.trace");
  // 8 MiB: step 1's 6 MiB block (event 7) does not fit beside the 3 MiB held.
  const Timeline timeline = replay_timeline(trace, 8 * kMiB);

  ASSERT_TRUE(timeline.oom.has_value());
  EXPECT_EQ(timeline.oom->event, 7u);
  EXPECT_EQ(timeline.oom->kind, TimelineMark::Kind::oom);
  EXPECT_THAT(timeline.oom->label, HasSubstr("6.00 MiB"));
  EXPECT_EQ(timeline.events, 8u);
  EXPECT_EQ(timeline.end_x, 7u);
  EXPECT_EQ(timeline.limit_bytes, 8 * kMiB);
  ASSERT_FALSE(timeline.marks.empty());
  EXPECT_EQ(timeline.marks.back().kind, TimelineMark::Kind::oom);
  // The last sample is the failed allocation, with the device as it was before it: nothing after it.
  EXPECT_EQ(timeline.samples.back().event, 7u);
  EXPECT_EQ(timeline.samples.back().in_use_bytes, 3 * kMiB);
  // Step 1 was cut by the OOM: it ends there.
  ASSERT_EQ(timeline.steps.size(), 2u);
  EXPECT_EQ(timeline.steps[1].end_x, 7u);
}

TEST(TelemetryTimeline, AnOutOfMemoryOnTheFirstEventShowsTheDeviceBeforeIt) {
  const Trace trace = parse_trace("a 1 16777216\nf 1\n", "too-big.trace");
  Runtime runtime(quiet_config(Growth::preallocate, 8 * kMiB));
  TimelineRecorder recorder(trace);
  const ReplayResult result = replay(trace, runtime.device("sim:1GiB"), {.timeline = &recorder});
  const Timeline timeline = recorder.finish(result);
  ASSERT_TRUE(timeline.oom.has_value());
  EXPECT_EQ(timeline.events, 1u);
  ASSERT_EQ(timeline.samples.size(), 1u);
  EXPECT_EQ(timeline.samples[0].in_use_bytes, 0u);
  EXPECT_EQ(timeline.samples[0].reserved_bytes, 8 * kMiB);  // preallocate mapped the limit before any event
}

TEST(TelemetryTimeline, TagAreasAddUpToInUse) {
  Trace trace = parse_trace(
      "a 1 3000000\na 2 1000000\na 3 500000\nf 2\na 4 2000000\nf 1\na 5 123457\nf 3\nf 4\nf 5\n", "tagged.trace");
  trace.tags = {"", "weights", "activations"};
  const std::vector<std::uint16_t> tag_of_allocation{1, 2, 0, 2, 1};
  std::size_t allocation = 0;
  for (TraceEvent& event : trace.events) {
    if (event.kind == TraceEvent::Kind::allocate) event.tag = tag_of_allocation[allocation++];
  }
  const Timeline timeline = replay_timeline(trace, 64 * kMiB);

  ASSERT_EQ(timeline.tags.size(), 3u);
  EXPECT_EQ(timeline.tag_label(0), "untagged");
  EXPECT_EQ(timeline.tag_label(1), "weights");
  ASSERT_EQ(timeline.samples.size(), trace.events.size());
  bool some_of_each = false;
  for (const TimelineSample& sample : timeline.samples) {
    ASSERT_EQ(sample.tag_bytes.size(), 3u);
    EXPECT_EQ(std::accumulate(sample.tag_bytes.begin(), sample.tag_bytes.end(), std::uint64_t{0}),
              sample.in_use_bytes)
        << "at event " << sample.event;
    some_of_each = some_of_each || std::all_of(sample.tag_bytes.begin(), sample.tag_bytes.end(),
                                               [](std::uint64_t bytes) { return bytes > 0; });
  }
  EXPECT_TRUE(some_of_each);
  // Event 1 allocated the first activation: weights hold the 3 MB block (rounded), activations the 1 MB one.
  EXPECT_GE(timeline.samples[1].tag_bytes[1], 3000000u);
  EXPECT_GE(timeline.samples[1].tag_bytes[2], 1000000u);

  const std::string svg = timeline_svg({timeline});
  EXPECT_THAT(svg, HasSubstr(R"(class="tag-area" data-tag="weights")"));
  EXPECT_THAT(svg, HasSubstr(R"(data-tag="activations")"));
  EXPECT_THAT(svg, Not(HasSubstr(R"(class="in-use-area")")));
}

TEST(TelemetryTimeline, AnUntaggedTraceHasNoTagSeries) {
  const Timeline timeline = replay_timeline(parse_trace(kStepTrace, "steps.trace"), 64 * kMiB);
  EXPECT_TRUE(timeline.tags.empty());
  for (const TimelineSample& sample : timeline.samples) EXPECT_TRUE(sample.tag_bytes.empty());
}

TEST(TelemetryTimeline, TimedTracesUseTimeOnTheXAxis) {
  Trace trace = parse_trace(kStepTrace, "timed.trace");
  trace.has_times = true;
  for (std::size_t i = 0; i < trace.events.size(); ++i) trace.events[i].time_ns = 1'000'000 * (i + 1);
  const Timeline timeline = replay_timeline(trace, 64 * kMiB);
  EXPECT_TRUE(timeline.has_times);
  EXPECT_EQ(timeline.samples[3].x, 4'000'000u);
  EXPECT_EQ(timeline.samples[3].time_ns, 4'000'000u);
  EXPECT_EQ(timeline.end_x, 11'000'000u);
  EXPECT_EQ(timeline.steps[1].begin_x, 8'000'000u);
  EXPECT_THAT(timeline_svg({timeline}), HasSubstr(R"(data-x-axis="time_ns")"));
}

// Element names in document order, checking that every element closes in the order it opened.
std::vector<std::string> xml_elements(const std::string& text) {
  std::vector<std::string> elements, open;
  for (std::size_t at = text.find('<'); at != std::string::npos; at = text.find('<', at + 1)) {
    const std::size_t end = text.find('>', at);
    EXPECT_NE(end, std::string::npos);
    if (end == std::string::npos) break;
    const std::string tag = text.substr(at + 1, end - at - 1);
    EXPECT_EQ(tag.find('<'), std::string::npos) << "'<' inside a tag: " << tag;
    if (tag.front() == '?') continue;
    if (tag.front() == '/') {
      EXPECT_FALSE(open.empty()) << tag;
      if (open.empty()) break;
      EXPECT_EQ(tag.substr(1), open.back());
      open.pop_back();
      continue;
    }
    const std::string name = tag.substr(0, tag.find_first_of(" \n/"));
    elements.push_back(name);
    if (tag.back() != '/') open.push_back(name);
  }
  EXPECT_TRUE(open.empty()) << "unclosed: " << (open.empty() ? "" : open.back());
  return elements;
}

std::size_t count_of(const std::string& text, const std::string& part) {
  std::size_t count = 0;
  for (std::size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++count;
  return count;
}

TEST(TelemetryTimeline, SvgIsWellFormedWithTheChartsElements) {
  const Trace trace = parse_trace(kStepTrace, "steps.trace");
  const Timeline ran = replay_timeline(trace, 64 * kMiB);
  const Timeline ran_out = replay_timeline(trace, 8 * kMiB);
  const std::string svg = timeline_svg({ran, ran_out});

  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  const std::vector<std::string> elements = xml_elements(svg);
  EXPECT_EQ(std::count(elements.begin(), elements.end(), "svg"), 3);
  EXPECT_EQ(count_of(svg, R"(class="plimsoll-timeline")"), 2u);
  EXPECT_EQ(count_of(svg, R"(<path class="in-use")"), 2u);
  EXPECT_EQ(count_of(svg, R"(<path class="reserved")"), 2u);
  EXPECT_EQ(count_of(svg, R"(<rect class="step")"), 4u);
  EXPECT_EQ(count_of(svg, R"(<line class="oom")"), 1u);
  EXPECT_EQ(count_of(svg, R"(class="oom-label")"), 1u);
  // The 8 MiB limit is near that run's data and drawn; 64 MiB over a 9 MiB peak is not.
  EXPECT_EQ(count_of(svg, R"(<line class="limit")"), 1u);
  EXPECT_THAT(svg, HasSubstr("on_demand on sim:1GiB (limit 8.00 MiB)"));
  EXPECT_THAT(svg, HasSubstr(">limit 8.00 MiB</text>"));  // in that chart's legend
  // The marker's text is escaped, not markup.
  EXPECT_THAT(svg, HasSubstr("model tiny &lt;net&gt;"));
  EXPECT_THAT(svg, Not(HasSubstr("<net>")));
  EXPECT_THAT(svg, HasSubstr("out of memory at event 7"));
  // The second chart sits under the first.
  EXPECT_THAT(svg, HasSubstr(fmt::format(R"(y="{}")", kChartHeight)));
}

TEST(TelemetryTimeline, SvgOfAnEmptyReplaySaysSo) {
  const Trace trace = parse_trace("", "empty.trace");
  TimelineRecorder recorder(trace);
  const std::string svg = timeline_svg({recorder.finish(ReplayResult{})});
  xml_elements(svg);
  EXPECT_THAT(svg, HasSubstr("no events replayed"));
}

TEST(TelemetryTimeline, AxisTicksAreRoundAndLabelledInTheSpansUnit) {
  const std::vector<AxisTick> bytes = axis_ticks(AxisKind::bytes, 0, 1000.0 * kMiB);
  ASSERT_GE(bytes.size(), 4u);
  EXPECT_EQ(bytes[0].label, "0");
  EXPECT_EQ(bytes[1].label, "200 MiB");
  EXPECT_DOUBLE_EQ(bytes[1].value, 200.0 * kMiB);
  const std::vector<AxisTick> events = axis_ticks(AxisKind::events, 0, 30000);
  EXPECT_EQ(events[1].label, "5k");
  EXPECT_EQ(axis_label(AxisKind::time_ns, 2.5e6), "2.5 ms");
  EXPECT_EQ(axis_label(AxisKind::bytes, 1.25 * 1024 * kMiB), "1.25 GiB");
}

TEST(TelemetryTimeline, ChromeTraceHasCountersStepsAndInstants) {
  const Trace trace = parse_trace(kStepTrace, "steps.trace");
  const Timeline ran = replay_timeline(trace, 64 * kMiB);
  const Timeline ran_out = replay_timeline(trace, 8 * kMiB);
  const nlohmann::json document = nlohmann::json::parse(chrome_trace_json({ran, ran_out}));

  ASSERT_TRUE(document.contains("traceEvents"));
  std::map<std::string, std::size_t> counters;  // "pid/name" -> count
  std::map<int, double> last_ts;
  std::vector<std::string> instants, steps, processes;
  for (const nlohmann::json& event : document["traceEvents"]) {
    const std::string phase = event.at("ph");
    const int pid = event.at("pid");
    EXPECT_TRUE(pid == 1 || pid == 2);
    if (phase == "M") {
      if (event["name"] == "process_name") processes.push_back(event["args"]["name"]);
      continue;
    }
    const double ts = event.at("ts");
    EXPECT_GE(ts, 0.0);
    EXPECT_LE(ts, 10.0);  // one microsecond per event, 11 events
    if (phase == "C") {
      ++counters[std::to_string(pid) + "/" + event["name"].get<std::string>()];
      EXPECT_TRUE(event["args"]["bytes"].is_number_unsigned());
      if (event["name"] == "in use") {
        EXPECT_GE(ts, last_ts[pid]) << "counter samples in time order";
        last_ts[pid] = ts;
      }
    } else if (phase == "i") {
      instants.push_back(std::to_string(pid) + "/" + event["name"].get<std::string>());
    } else if (phase == "X") {
      steps.push_back(std::to_string(pid) + "/" + event["name"].get<std::string>());
      EXPECT_GE(event.at("dur").get<double>(), 0.0);
    } else {
      ADD_FAILURE() << "unexpected phase " << phase;
    }
  }
  EXPECT_THAT(processes, ::testing::ElementsAre("steps.trace / on_demand on sim:1GiB", "steps.trace / on_demand on sim:1GiB"));
  EXPECT_EQ(counters["1/in use"], ran.samples.size());
  EXPECT_EQ(counters["1/reserved"], ran.samples.size());
  EXPECT_EQ(counters["2/in use"], ran_out.samples.size());
  EXPECT_THAT(steps, ::testing::ElementsAre("1/step 0", "1/step 1", "2/step 0", "2/step 1"));
  EXPECT_THAT(instants, ::testing::ElementsAre("1/model tiny <net>", "2/model tiny <net>", "2/OOM: 6.00 MiB asked"));
}

TEST(TelemetryTimeline, ChromeTraceUsesMicrosecondsOfTimedTraces) {
  Trace trace = parse_trace(kStepTrace, "timed.trace");
  trace.has_times = true;
  for (std::size_t i = 0; i < trace.events.size(); ++i) trace.events[i].time_ns = 1'000'000 * (i + 1);
  const nlohmann::json document = nlohmann::json::parse(chrome_trace_json({replay_timeline(trace, 64 * kMiB)}));
  double highest = 0;
  for (const nlohmann::json& event : document["traceEvents"]) {
    if (event["ph"] != "M") highest = std::max(highest, event["ts"].get<double>());
  }
  EXPECT_DOUBLE_EQ(highest, 11'000.0);  // 11 ms
}

TEST(TelemetryTimeline, HtmlEmbedsEveryChartAndItsDataSafely) {
  Trace trace = parse_trace("a 1 1048576\n# </script><b>\nf 1\n", "evil.trace");
  const Timeline timeline = replay_timeline(trace, 64 * kMiB);
  const std::string html = timeline_html({timeline, timeline});

  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_EQ(count_of(html, R"(class="plimsoll-timeline")"), 2u);
  EXPECT_EQ(count_of(html, R"(<div class="chart")"), 2u);
  EXPECT_EQ(count_of(html, R"(id="plimsoll-data")"), 1u);
  // Three scripts (error handler, data, behaviour): the marker's "</script>" ends none of them.
  EXPECT_EQ(count_of(html, "<script"), 3u);
  EXPECT_EQ(count_of(html, "</script>"), 3u);
  EXPECT_THAT(html, HasSubstr(R"(<\/script><b>)"));
  // No external resource: the page must open offline.
  EXPECT_THAT(html, Not(HasSubstr("src=")));
  EXPECT_THAT(html, Not(HasSubstr("href=")));
}

}  // namespace
}  // namespace plimsoll::telemetry
