#pragma once
// `plimsoll plan`'s output: a text report and the JSON object (docs/plan.md lists the keys).
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plimsoll/plan.hpp"

namespace plimsoll::plan {

std::string prediction_text(const StepModel& model, const Prediction& prediction);
std::string largest_batch_text(const StepModel& model, std::uint64_t device_bytes, double margin,
                               const std::vector<LargestBatch>& results);
/// What the recordings fit and what they do not: one paragraph for either text report.
std::string fit_text(const StepModel& model);

nlohmann::ordered_json prediction_json(const StepModel& model, const Prediction& prediction);
nlohmann::ordered_json largest_batch_json(const StepModel& model, std::uint64_t device_bytes, double margin,
                                          const std::vector<LargestBatch>& results);

}  // namespace plimsoll::plan
