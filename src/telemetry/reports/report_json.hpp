#pragma once
// The JSON documents of `plimsoll leaks --json`, `plimsoll replay --json` and `plimsoll estimate batch --json`, built in
// one place so the command line and the Python module (plimsoll.leaks, plimsoll.replay, plimsoll.estimate.batch)
// return the same keys (docs/leaks.md, docs/estimate.md, docs/python.md).
#include <string>
#include <string_view>

#include "plimsoll/estimate.hpp"

#include "plimsoll/trace.hpp"
#include "telemetry/leaks/leak_watch.hpp"
#include "telemetry/replay/replay.hpp"

namespace plimsoll::telemetry {

/// One JSON object: the verdict, rates, steps and every retained group (what `plimsoll leaks --json` prints).
std::string leak_report_json(const Trace& trace, const LeakReport& report);

/// One JSON object per replay (one line of `plimsoll replay --json`).
std::string replay_result_json(const ReplayResult& result);

/// One JSON object: a batch's, the queue's and the pipeline's bytes, and the budget's verdict. `budget_note` is the
/// command line's sentence about the budget (null in the document when empty).
std::string batch_estimate_json(const BatchPipeline& pipeline, const BatchEstimate& estimate,
                                std::string_view budget_note = {});

}  // namespace plimsoll::telemetry
