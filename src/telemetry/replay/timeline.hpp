#pragma once
// A replay's memory over time, small enough to draw: what `plimsoll replay --plot/--html/--chrome-trace` show.
// The recorder sees the device after every trace event and keeps, per bucket of consecutive events, only the
// samples where in-use and reserved bytes were lowest and highest, so a 10-million-event trace gives a few
// thousand samples and no peak is lost.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "plimsoll/trace.hpp"

namespace plimsoll::telemetry {

struct ReplayResult;

/// The device right after one trace event. `x` is where it sits on the chart's horizontal axis: the event's
/// time in nanoseconds when the trace has times (Trace::has_times), else the event's index.
struct TimelineSample {
  std::size_t event = 0;  // index into Trace::events
  std::uint64_t time_ns = 0;
  std::uint64_t x = 0;
  std::uint64_t in_use_bytes = 0;
  std::uint64_t reserved_bytes = 0;
  int step = -1;                         // TraceStep::number of the step holding the event; -1 outside steps
  std::vector<std::uint64_t> tag_bytes;  // in use per Trace::tags index; empty when no event is tagged
};

/// A point in the trace worth a vertical line: a marker ("# text"), an OOM the recording device had, or the
/// replay's own OOM.
struct TimelineMark {
  enum class Kind { marker, recorded_oom, oom };
  Kind kind = Kind::marker;
  std::size_t event = 0;
  std::uint64_t x = 0;
  std::string label;
};

struct TimelineStep {
  int number = 0;
  std::uint64_t begin_x = 0;  // of its first event
  std::uint64_t end_x = 0;    // of its "# step N end" marker
};

struct Timeline {
  std::string trace;   // origin of the trace
  std::string device;  // the replay's device and policy
  std::string policy;
  bool has_times = false;  // x is nanoseconds, else event indices
  std::size_t events = 0;  // events replayed: all of them, or up to and including the one that ran out of memory
  std::uint64_t end_x = 0;  // x of the last event replayed
  std::uint64_t limit_bytes = 0;  // the device's memory limit; 0 when not known
  std::vector<std::string> tags;  // Trace::tags ([0] = "" untagged) when some event is tagged, else empty
  std::vector<TimelineSample> samples;  // in event order
  std::vector<TimelineStep> steps;      // at most kMaxTimelineMarks
  std::vector<TimelineMark> marks;      // at most kMaxTimelineMarks, step markers left out (steps draw them)
  std::optional<TimelineMark> oom;      // the replay's OOM, also the last of `marks`
  std::size_t marks_left_out = 0;       // markers and steps past the cap

  /// A display name for the tag at `index` of `tags`: "untagged" for 0.
  std::string tag_label(std::size_t index) const;
  std::uint64_t peak_in_use() const;
  std::uint64_t peak_reserved() const;
};

/// Buckets per series: each keeps up to 4 samples (lowest and highest in use and reserved).
inline constexpr std::size_t kDefaultTimelineBuckets = 1000;
/// Markers and steps beyond this many are counted, not drawn: a chart full of lines shows nothing.
inline constexpr std::size_t kMaxTimelineMarks = 1000;

/// Fed by replay() (ReplayOptions::timeline) after every event, in order.
class TimelineRecorder {
 public:
  explicit TimelineRecorder(const Trace& trace, std::size_t buckets = kDefaultTimelineBuckets);

  /// The device before the first event: what a timeline that ends at once (an OOM on event 0) shows, and the
  /// base of the per-tag accounting (in use is non-zero when the allocator was not fresh).
  /// `limit_bytes` is the device's memory limit, drawn as a line near the data.
  void begin(std::uint64_t in_use_bytes, std::uint64_t reserved_bytes, std::uint64_t limit_bytes) {
    last_in_use_ = in_use_bytes;
    last_reserved_ = reserved_bytes;
    limit_bytes_ = limit_bytes;
  }
  /// The device's memory right after event `index` (every event, in order, markers included).
  void record(std::size_t index, std::uint64_t in_use_bytes, std::uint64_t reserved_bytes);
  /// The timeline, named after the replay's device and policy, ending at its OOM if it had one.
  Timeline finish(const ReplayResult& result);

 private:
  TimelineSample sample_at(std::size_t index, std::uint64_t in_use, std::uint64_t reserved) const;
  void account_tags(const TraceEvent& event, std::uint64_t in_use);
  void flush_bucket();
  std::uint64_t x_of(std::size_t index) const;

  const Trace& trace_;
  std::size_t bucket_events_;
  bool tagged_;
  std::vector<TimelineSample> samples_;
  // The current bucket's extremes: lowest and highest in use, lowest and highest reserved.
  std::vector<TimelineSample> bucket_;
  std::size_t last_index_ = 0;
  std::uint64_t last_reserved_ = 0;
  bool recorded_any_ = false;
  // Per-tag accounting: the device's in-use growth on each allocation is that block's rounded size.
  std::uint64_t last_in_use_ = 0;
  std::vector<std::uint64_t> tag_in_use_;
  std::vector<std::uint64_t> slot_bytes_;
  std::vector<std::uint16_t> slot_tag_;
  std::uint64_t limit_bytes_ = 0;
};

}  // namespace plimsoll::telemetry
