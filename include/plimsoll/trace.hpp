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

struct Trace {
  std::string origin;                // file path, for messages
  std::vector<TraceEvent> events;
  std::vector<std::string> markers;  // marker texts, without "# "
  std::vector<TraceStep> steps;      // from "# step N begin" / "# step N end" markers
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
/// RMM's CSV by its header line, otherwise the text format.
Trace read_trace(const std::string& path);

}  // namespace plimsoll
