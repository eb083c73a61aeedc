#include "telemetry/render/chrome_trace.hpp"

#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace plimsoll::telemetry {
namespace {

using Json = nlohmann::ordered_json;

// Thread ids inside each timeline's process: counters belong to the process; steps and point events get a
// track each, named by thread_name metadata.
constexpr int kStepsThread = 1;
constexpr int kEventsThread = 2;

double microseconds(const Timeline& timeline, std::uint64_t x) {
  return timeline.has_times ? static_cast<double>(x) / 1000.0 : static_cast<double>(x);
}

Json counter(std::string_view name, int pid, double ts, Json args) {
  return Json{{"name", name}, {"ph", "C"}, {"ts", ts}, {"pid", pid}, {"tid", 0}, {"args", std::move(args)}};
}

Json metadata(std::string_view what, int pid, int tid, std::string_view name) {
  return Json{{"name", what}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", {{"name", name}}}};
}

void add_timeline(Json& events, const Timeline& timeline, int pid) {
  const std::string name = fmt::format("{} / {} on {}", std::filesystem::path(timeline.trace).filename().string(),
                                       timeline.policy, timeline.device);
  events.push_back(metadata("process_name", pid, 0, name));
  events.push_back(metadata("thread_name", pid, kStepsThread, "steps"));
  events.push_back(metadata("thread_name", pid, kEventsThread, "markers and OOMs"));
  for (const TimelineSample& sample : timeline.samples) {
    const double ts = microseconds(timeline, sample.x);
    events.push_back(counter("in use", pid, ts, {{"bytes", sample.in_use_bytes}}));
    events.push_back(counter("reserved", pid, ts, {{"bytes", sample.reserved_bytes}}));
    if (timeline.tags.empty()) continue;
    Json by_tag = Json::object();
    for (std::size_t tag = 0; tag < sample.tag_bytes.size(); ++tag) {
      by_tag[timeline.tag_label(tag)] = sample.tag_bytes[tag];
    }
    events.push_back(counter("in use by tag", pid, ts, std::move(by_tag)));
  }
  for (const TimelineStep& step : timeline.steps) {
    const double begin = microseconds(timeline, step.begin_x);
    events.push_back(Json{{"name", fmt::format("step {}", step.number)},
                          {"cat", "step"},
                          {"ph", "X"},
                          {"ts", begin},
                          {"dur", microseconds(timeline, step.end_x) - begin},
                          {"pid", pid},
                          {"tid", kStepsThread}});
  }
  for (const TimelineMark& mark : timeline.marks) {
    const std::string_view category = mark.kind == TimelineMark::Kind::marker ? "marker" : "oom";
    events.push_back(Json{{"name", mark.label},
                          {"cat", category},
                          {"ph", "i"},
                          {"s", "t"},
                          {"ts", microseconds(timeline, mark.x)},
                          {"pid", pid},
                          {"tid", kEventsThread},
                          {"args", {{"event", mark.event}}}});
  }
}

}  // namespace

std::string chrome_trace_json(const std::vector<Timeline>& timelines) {
  Json events = Json::array();
  for (std::size_t i = 0; i < timelines.size(); ++i) add_timeline(events, timelines[i], static_cast<int>(i + 1));
  Json document{{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
  return document.dump() + "\n";
}

}  // namespace plimsoll::telemetry
