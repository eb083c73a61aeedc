#pragma once
// The JSON documents of `plimsoll leaks --json` and `plimsoll replay --json`, built in one place so the command
// line and the Python module (plimsoll.leaks, plimsoll.replay) return the same keys (docs/leaks.md, docs/python.md).
#include <string>

#include "plimsoll/trace.hpp"
#include "telemetry/leak_watch.hpp"
#include "telemetry/replay.hpp"

namespace plimsoll::telemetry {

/// One JSON object: the verdict, rates, steps and every retained group (what `plimsoll leaks --json` prints).
std::string leak_report_json(const Trace& trace, const LeakReport& report);

/// One JSON object per replay (one line of `plimsoll replay --json`).
std::string replay_result_json(const ReplayResult& result);

}  // namespace plimsoll::telemetry
