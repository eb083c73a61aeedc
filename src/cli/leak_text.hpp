#pragma once
// Sentences about a leak report, shared by `plimsoll leaks` and `plimsoll train`.
#include <string>

#include "plimsoll/trace.hpp"
#include "telemetry/leaks/leak_watch.hpp"

namespace plimsoll::cli {

/// The verdict in one line ("LEAK: memory kept past its step grows by 392.00 KiB per step ..."): what a reader
/// needs before any table.
std::string leak_verdict_line(const telemetry::LeakReport& report);
/// Where a group of retained allocations was made (its call site, or its position in the step), without its tag.
std::string where_made(const telemetry::LeakGroup& group, const Trace& trace);

}  // namespace plimsoll::cli
