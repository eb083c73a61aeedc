#pragma once
// Timelines in the Trace Event Format: the JSON that Perfetto (ui.perfetto.dev) and chrome://tracing open.
#include <string>
#include <vector>

#include "telemetry/replay/timeline.hpp"

namespace plimsoll::telemetry {

/// {"traceEvents": [...]}: one process per timeline (named "trace / policy on device"), holding
///  - counter tracks (ph "C", values in bytes) "in use" and "reserved", and for tagged traces "in use by tag"
///    (one series per tag, which Perfetto stacks);
///  - a thread "steps" with one complete slice (ph "X") per training step;
///  - a thread "events" with an instant event (ph "i") per marker, recorded OOM and the replay's OOM.
/// ts is in microseconds: the recording's time for timed traces, else one microsecond per trace event.
std::string chrome_trace_json(const std::vector<Timeline>& timelines);

}  // namespace plimsoll::telemetry
