#include "telemetry/replay/timeline.hpp"

#include <algorithm>
#include <iterator>

#include <fmt/format.h>

#include "plimsoll/size.hpp"
#include "telemetry/replay/replay.hpp"

namespace plimsoll::telemetry {
namespace {

bool has_tagged_event(const Trace& trace) {
  return trace.tags.size() > 1 &&
         std::any_of(trace.events.begin(), trace.events.end(), [](const TraceEvent& event) { return event.tag != 0; });
}

int step_holding(const std::vector<TraceStep>& steps, std::size_t index) {
  const auto after = std::upper_bound(steps.begin(), steps.end(), index,
                                      [](std::size_t at, const TraceStep& step) { return at < step.begin; });
  if (after == steps.begin()) return -1;
  const TraceStep& step = *std::prev(after);
  return index < step.end ? step.number : -1;
}

// The "# step N begin" / "# step N end" markers: the chart draws them as steps, not as marker lines.
std::vector<std::size_t> step_marker_events(const std::vector<TraceStep>& steps) {
  std::vector<std::size_t> events;
  for (const TraceStep& step : steps) {
    if (step.begin > 0) events.push_back(step.begin - 1);
    events.push_back(step.end);
  }
  std::sort(events.begin(), events.end());
  return events;
}

}  // namespace

std::string Timeline::tag_label(std::size_t index) const {
  return index == 0 || index >= tags.size() ? std::string("untagged") : tags[index];
}

std::uint64_t Timeline::peak_in_use() const {
  std::uint64_t peak = 0;
  for (const TimelineSample& sample : samples) peak = std::max(peak, sample.in_use_bytes);
  return peak;
}

std::uint64_t Timeline::peak_reserved() const {
  std::uint64_t peak = 0;
  for (const TimelineSample& sample : samples) peak = std::max(peak, sample.reserved_bytes);
  return peak;
}

TimelineRecorder::TimelineRecorder(const Trace& trace, std::size_t buckets)
    : trace_(trace),
      bucket_events_(std::max<std::size_t>(1, (trace.events.size() + buckets - 1) / std::max<std::size_t>(1, buckets))),
      tagged_(has_tagged_event(trace)) {
  if (tagged_) {
    tag_in_use_.assign(trace.tags.size(), 0);
    slot_bytes_.assign(trace.slots, 0);
    slot_tag_.assign(trace.slots, 0);
  }
}

std::uint64_t TimelineRecorder::x_of(std::size_t index) const {
  return trace_.has_times ? trace_.events[index].time_ns : index;
}

TimelineSample TimelineRecorder::sample_at(std::size_t index, std::uint64_t in_use, std::uint64_t reserved) const {
  return TimelineSample{.event = index,
                        .time_ns = trace_.events[index].time_ns,
                        .x = x_of(index),
                        .in_use_bytes = in_use,
                        .reserved_bytes = reserved,
                        .step = step_holding(trace_.steps, index),
                        .tag_bytes = tag_in_use_};
}

void TimelineRecorder::account_tags(const TraceEvent& event, std::uint64_t in_use) {
  if (event.kind == TraceEvent::Kind::allocate) {
    const std::uint64_t grew = in_use > last_in_use_ ? in_use - last_in_use_ : 0;
    const std::uint16_t tag = event.tag < tag_in_use_.size() ? event.tag : 0;
    tag_in_use_[tag] += grew;
    slot_bytes_[event.slot] = grew;
    slot_tag_[event.slot] = tag;
  } else if (event.kind == TraceEvent::Kind::free) {
    std::uint64_t& bytes = tag_in_use_[slot_tag_[event.slot]];
    bytes -= std::min(bytes, slot_bytes_[event.slot]);
    slot_bytes_[event.slot] = 0;
  }
}

void TimelineRecorder::record(std::size_t index, std::uint64_t in_use_bytes, std::uint64_t reserved_bytes) {
  if (tagged_) account_tags(trace_.events[index], in_use_bytes);
  if (recorded_any_ && index / bucket_events_ != last_index_ / bucket_events_) flush_bucket();
  recorded_any_ = true;
  last_index_ = index;
  last_in_use_ = in_use_bytes;
  last_reserved_ = reserved_bytes;

  // Built only when it replaces an extreme: most events do not, and a sample copies the per-tag bytes.
  std::optional<TimelineSample> now;
  const auto keep_if = [&](std::size_t slot, bool more_extreme) {
    if (!more_extreme) return;
    if (!now) now = sample_at(index, in_use_bytes, reserved_bytes);
    bucket_[slot] = *now;
  };
  if (bucket_.empty()) {
    bucket_.assign(4, sample_at(index, in_use_bytes, reserved_bytes));
    return;
  }
  keep_if(0, in_use_bytes < bucket_[0].in_use_bytes);
  keep_if(1, in_use_bytes > bucket_[1].in_use_bytes);
  keep_if(2, reserved_bytes < bucket_[2].reserved_bytes);
  keep_if(3, reserved_bytes > bucket_[3].reserved_bytes);
}

void TimelineRecorder::flush_bucket() {
  std::sort(bucket_.begin(), bucket_.end(),
            [](const TimelineSample& a, const TimelineSample& b) { return a.event < b.event; });
  const auto distinct_end = std::unique(bucket_.begin(), bucket_.end(), [](const TimelineSample& a,
                                                                          const TimelineSample& b) {
    return a.event == b.event;
  });
  std::move(bucket_.begin(), distinct_end, std::back_inserter(samples_));
  bucket_.clear();
}

Timeline TimelineRecorder::finish(const ReplayResult& result) {
  flush_bucket();
  Timeline timeline;
  timeline.trace = trace_.origin;
  timeline.device = result.device;
  timeline.policy = result.policy;
  timeline.has_times = trace_.has_times;
  timeline.limit_bytes = limit_bytes_;
  if (tagged_) timeline.tags = trace_.tags;

  // The replay stops at its OOM: the failed allocation is the last event, with the device as it was before.
  std::optional<std::size_t> last;
  if (recorded_any_) last = last_index_;
  if (result.oom_event) last = *result.oom_event;
  if (!last) return timeline;
  if (samples_.empty() || samples_.back().event != *last) samples_.push_back(sample_at(*last, last_in_use_, last_reserved_));
  timeline.events = *last + 1;
  timeline.end_x = x_of(*last);
  timeline.samples = std::move(samples_);
  samples_.clear();

  for (const TraceStep& step : trace_.steps) {
    if (step.begin >= timeline.events) break;
    if (timeline.steps.size() == kMaxTimelineMarks) {
      ++timeline.marks_left_out;
      continue;
    }
    timeline.steps.push_back({.number = step.number,
                              .begin_x = x_of(step.begin),
                              .end_x = x_of(std::min(step.end, *last))});
  }
  const std::vector<std::size_t> step_markers = step_marker_events(trace_.steps);
  for (std::size_t index = 0; index < timeline.events; ++index) {
    const TraceEvent& event = trace_.events[index];
    TimelineMark mark{.kind = TimelineMark::Kind::marker, .event = index, .x = x_of(index), .label = {}};
    if (event.kind == TraceEvent::Kind::marker) {
      if (std::binary_search(step_markers.begin(), step_markers.end(), index)) continue;
      mark.label = event.slot < trace_.markers.size() ? trace_.markers[event.slot] : std::string("marker");
    } else if (event.kind == TraceEvent::Kind::oom) {
      mark.kind = TimelineMark::Kind::recorded_oom;
      mark.label = fmt::format("recorded OOM: {} asked", format_size(event.bytes));
    } else {
      continue;
    }
    if (timeline.marks.size() == kMaxTimelineMarks) {
      ++timeline.marks_left_out;
      continue;
    }
    timeline.marks.push_back(std::move(mark));
  }
  if (result.oom_event) {
    const std::size_t at = *result.oom_event;
    timeline.oom = TimelineMark{.kind = TimelineMark::Kind::oom,
                                .event = at,
                                .x = x_of(at),
                                .label = fmt::format("OOM: {} asked", format_size(trace_.events[at].bytes))};
    timeline.marks.push_back(*timeline.oom);
  }
  return timeline;
}

}  // namespace plimsoll::telemetry
