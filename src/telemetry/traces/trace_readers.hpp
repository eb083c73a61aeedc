#pragma once
// Readers of trace formats other than plimsoll's own, each turning a whole file held in memory into the Trace
// model (include/plimsoll/trace.hpp). read_trace picks one by the file's first bytes; docs/trace-readers.md
// describes how each format maps to the model.
#include <string_view>

#include "plimsoll/trace.hpp"

namespace plimsoll::telemetry {

/// The first line of every log RMM's logging_resource_adaptor writes.
inline constexpr std::string_view kRmmCsvHeader = "Thread,Time,Action,Pointer,Size,Stream";

/// True when `text` starts with RMM's CSV header line (a trailing '\r' allowed): the dispatch test of read_trace.
bool has_rmm_csv_header(std::string_view text);

/// Parses a log of rmm::mr::logging_resource_adaptor. Throws InvalidArgument "FILE:LINE: what is wrong; the fix"
/// for a wrong header, a malformed line, an unknown action, or a free of a pointer that is not live.
Trace parse_rmm_csv(std::string_view text, std::string_view origin);

}  // namespace plimsoll::telemetry
