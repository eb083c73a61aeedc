#pragma once
// Allocation traces: the text format of ../shared/traces ("a <id> <bytes>", "f <id>", "# marker").
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace plimsoll {

struct TraceEvent {
  enum class Kind : std::uint8_t { allocate, free, marker };
  Kind kind = Kind::marker;
  std::uint32_t slot = 0;     // dense index of the allocation (ids resolved at load); marker: index into markers
  std::uint64_t bytes = 0;    // allocate only
  std::uint32_t line = 0;     // 1-based line in the file, for messages
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
  std::uint32_t slots = 0;           // distinct allocations
  std::uint64_t peak_live_bytes = 0;
  std::size_t allocations = 0;
  std::size_t frees = 0;
};

/// Parses a whole trace. Throws InvalidArgument "FILE:LINE: what is wrong; the fix" for a malformed line,
/// an unknown or repeated id, or a free of an id that is no longer live.
Trace parse_trace(std::string_view text, std::string_view origin);
Trace read_trace(const std::string& path);

}  // namespace plimsoll
