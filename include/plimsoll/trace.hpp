#pragma once
// Allocation traces in memory, whatever file they came from: the text format of ../shared/traces
// ("a <id> <bytes>", "f <id>", "# marker"), plimsoll's own binary format (docs/trace-format.md), RMM's logging
// CSV, and PyTorch snapshots (through tools/torch_snapshot/to_plimsoll.py).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace plimsoll {

struct TraceEvent {
  // allocate/free change what is live; map/unmap (device memory taken from or given back to the backing) and
  // oom (a request that failed, `bytes` asked for) are what the recording device did, kept for timelines.
  enum class Kind : std::uint8_t { allocate, free, marker, map, unmap, oom };
  Kind kind = Kind::marker;
  std::uint32_t slot = 0;     // dense index of the allocation (ids resolved at load); marker: index into markers
  std::uint64_t bytes = 0;    // allocate, map, unmap, oom
  std::uint32_t line = 0;     // 1-based line (text, CSV) or record number (binary) in the file, for messages
  // Optional context; zero when the source format does not carry it (the text format carries none).
  std::uint16_t tag = 0;      // index into Trace::tags; 0 = untagged
  std::uint16_t device = 0;   // index into Trace::devices
  std::uint32_t site = 0;     // index into Trace::sites; 0 = unknown call site
  std::uint32_t thread = 0;   // small per-trace thread number
  std::uint64_t time_ns = 0;  // since the start of the recording
  std::uint64_t stream = 0;   // CUDA stream handle, 0 = default stream / host
};

/// A training step's events: [begin, end) indices into Trace::events.
struct TraceStep {
  int number = 0;
  std::size_t begin = 0;
  std::size_t end = 0;
};

/// Where Trace::steps came from.
enum class StepSource : std::uint8_t {
  none,      // no step markers, and no repeating allocation pattern was found
  markers,   // "step N begin" / "step N end" markers in the file
  detected,  // no markers: found from the repeating allocation pattern (detect_steps)
};

/// "none", "markers", "detected" (the JSON spelling).
const char* to_string(StepSource source);

/// What detect_steps found in a trace without step markers.
struct StepDetection {
  std::vector<TraceStep> steps;        // numbered 0, 1, ...; empty when no pattern repeats
  std::size_t period_events = 0;       // allocations and frees in one steady step (the repeating unit)
  double repeating_fraction = 0;       // of the steady steps' events, those equal (kind and size) to the event at
                                       // the same place in the step before: how clean the repetition is, 0..1
  std::string summary;                 // one line for people: what was found, or why nothing was
};

struct Trace {
  std::string origin;                // file path, for messages
  std::vector<TraceEvent> events;
  std::vector<std::string> markers;  // marker texts, without "# "
  std::vector<TraceStep> steps;      // from "# step N begin" / "# step N end" markers, or detected
  StepSource step_source = StepSource::none;  // parse_trace and the readers set markers when they find any
  StepDetection step_detection;      // set by fill_missing_steps when the steps were looked for in the pattern
  std::vector<std::string> tags{""};     // [0] is "" (untagged)
  std::vector<std::string> sites{""};    // call sites, "function (file:line)"; [0] is "" (unknown)
  std::vector<std::string> devices{""};  // device names; [0] is "" (unnamed, single-device traces)
  bool has_times = false;                // events carry time_ns
  bool cut_short = false;                // a recording whose writer stopped before closing it (a crash)
  std::uint32_t slots = 0;           // distinct allocations
  std::uint64_t peak_live_bytes = 0;
  std::size_t allocations = 0;
  std::size_t frees = 0;
};

/// Parses a whole trace. Throws InvalidArgument "FILE:LINE: what is wrong; the fix" for a malformed line,
/// an unknown or repeated id, or a free of an id that is no longer live.
Trace parse_trace(std::string_view text, std::string_view origin);
/// Reads a trace file of any supported format, told apart by content: plimsoll's binary format by its magic,
/// RMM's CSV by its header line, otherwise the text format. A trace without step markers gets its steps from
/// fill_missing_steps.
Trace read_trace(const std::string& path);

/// Finds the training steps of a trace that has no step markers from the repeating pattern of its allocations and
/// frees: the sequence of (allocate or free, bytes) events repeats once per step. A step is one whole period of
/// that pattern; the last step ends where the repetition stops (the teardown after it does not repeat), earlier
/// steps are found one period back each (within a tenth of a period, so steps that differ by a few events are
/// followed), and a first step that differs from the steady ones (warm-up) is found by its opening events.
/// Marker events are ignored. No steps when no pattern of at least 8 events repeats at least twice in a row.
/// docs/leaks.md describes the method and its accuracy on the shared traces.
StepDetection detect_steps(const Trace& trace);

/// Fills trace.steps with detect_steps when the trace has no step markers, and sets step_source and
/// step_detection; a trace with markers is left as it is. read_trace calls it; call it on a Trace built another
/// way (parse_trace, a recording in memory) before find_leaks or replay when its steps matter.
void fill_missing_steps(Trace& trace);

/// Where a program would call plimsoll::step() during the trace, indexed by event (size events + 1): as the first
/// step begins, then as each step ends and the next begins. `plimsoll replay` and `plimsoll plan` announce steps
/// there, so step-aware placement (docs/engine.md) sees what it would see in the job.
std::vector<bool> step_boundaries(const Trace& trace);

}  // namespace plimsoll
