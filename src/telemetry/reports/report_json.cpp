#include "telemetry/reports/report_json.hpp"

#include <cstddef>
#include <optional>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace plimsoll::telemetry {
namespace {

std::string name_in(const std::vector<std::string>& names, std::size_t index) {
  return index < names.size() ? names[index] : fmt::format("#{}", index);
}

// A value, or null when there is none.
template <typename T>
nlohmann::ordered_json optional_json(const std::optional<T>& value) {
  return value ? nlohmann::ordered_json(*value) : nlohmann::ordered_json(nullptr);
}

}  // namespace

std::string leak_report_json(const Trace& trace, const LeakReport& report) {
  nlohmann::ordered_json out;
  out["trace"] = trace.origin;
  out["leak"] = report.leak();
  out["verdict"] = to_string(report.verdict);
  out["steps"] = report.steps;
  out["steps_from"] = plimsoll::to_string(trace.step_source);
  if (trace.step_source != StepSource::markers) {
    nlohmann::ordered_json detection;
    detection["period_events"] = trace.step_detection.period_events;
    detection["repeating_fraction"] = trace.step_detection.repeating_fraction;
    detection["summary"] = trace.step_detection.summary;
    out["step_detection"] = std::move(detection);
  }
  out["bytes_per_step"] = report.bytes_per_step;
  out["allocations_per_step"] = report.allocations_per_step;
  out["growth_every_steps"] = report.growth_every_steps;
  out["growth_steps"] = report.growth_steps;
  out["steps_since_growth"] = report.steps_since_growth;
  out["first_growth_step"] = optional_json(report.first_growth_step);
  out["last_growth_step"] = optional_json(report.last_growth_step);
  out["retained_bytes"] = report.retained_bytes;
  out["retained_allocations"] = report.retained_allocations;
  out["warmup_bytes"] = report.warmup_bytes;
  nlohmann::ordered_json groups = nlohmann::ordered_json::array();
  for (const LeakGroup& group : report.groups) {
    nlohmann::ordered_json entry;
    entry["bytes"] = group.bytes;
    entry["allocations"] = group.allocations;
    entry["smallest"] = group.smallest;
    entry["largest"] = group.largest;
    entry["tag"] = group.tag == 0 ? "" : name_in(trace.tags, group.tag);
    entry["site"] = group.site == 0 ? "" : name_in(trace.sites, group.site);
    entry["position"] = group.site == 0 ? nlohmann::ordered_json(group.position) : nlohmann::ordered_json();
    entry["between_steps"] = group.between_steps;
    LeakGroup untagged = group;  // "where" names the place alone; the tag has its own key
    untagged.tag = 0;
    entry["where"] = describe_origin(untagged, trace.tags, trace.sites);
    entry["first_step"] = group.first_step;
    entry["last_step"] = group.last_step;
    groups.push_back(std::move(entry));
  }
  out["groups"] = std::move(groups);
  return out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string replay_result_json(const ReplayResult& result) {
  nlohmann::ordered_json line;
  line["trace"] = result.trace;
  line["device"] = result.device;
  line["policy"] = result.policy;
  line["steps"] = result.steps;
  line["steps_from"] = result.steps_from;
  line["peak_live_bytes"] = result.peak_live_bytes;
  line["peak_in_use_bytes"] = result.peak_in_use_bytes;
  line["peak_reserved_bytes"] = result.peak_reserved_bytes;
  line["reserved_over_live"] = result.reserved_over_live;
  line["maps"] = result.maps;
  line["unmaps"] = result.unmaps;
  line["steady_maps"] = result.steady_maps;
  line["steady_unmaps"] = result.steady_unmaps;
  line["maps_by_step"] = result.maps_by_step;
  line["unmaps_by_step"] = result.unmaps_by_step;
  const StepPlanStats& plan = result.step_plan;
  line["step_plan"] = {{"steps", plan.steps},         {"plans", plan.plans}, {"unfit", plan.unfit}, {"stale", plan.stale},
                       {"learning", plan.learning},   {"followed", plan.followed},
                       {"growth", plan.growth},
                       {"fallbacks", plan.fallbacks()}, {"not_in_plan", plan.not_in_plan},
                       {"occupied", plan.occupied},   {"over_limit", plan.over_limit},
                       {"past_plan", plan.past_plan}, {"skipped", plan.skipped},
                       {"plan_bytes", plan.plan_bytes}, {"plan_peak_bytes", plan.plan_peak_bytes},
                       {"packs", plan.packs}, {"pack_ms", static_cast<double>(plan.pack_ns) / 1e6},
                       {"transitions", plan.transitions}, {"transition_followed", plan.transition_followed},
                       {"transition_maps", plan.transition_maps}, {"transition_unmaps", plan.transition_unmaps},
                       {"transitions_abandoned", plan.transitions_abandoned},
                       {"steps_given_up", plan.steps_given_up}};
  const RunPlanStats& run = result.run_plan;
  line["run_plan"] = {{"loaded", run.loaded},     {"entries", run.entries}, {"placed", run.placed}, {"made_room", run.made_room}, {"unparked", run.unparked}, {"mapped_ahead", run.mapped_ahead},
                      {"ended_at", run.ended_at}, {"ended_by", std::string(to_string(run.ended_by))}};
  line["oom"] = result.oom;
  line["oom_event"] = result.oom_event ? nlohmann::ordered_json(*result.oom_event) : nlohmann::ordered_json();
  line["ops"] = result.ops;
  line["ns_per_op"] = result.ns_per_op;
  return line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string batch_estimate_json(const BatchPipeline& pipeline, const BatchEstimate& estimate,
                                std::string_view budget_note) {
  nlohmann::ordered_json out;
  out["shape"] = pipeline.sample.to_string();
  out["dtype"] = std::string(to_string(pipeline.dtype));
  out["dtype_bytes"] = dtype_bytes(pipeline.dtype);
  out["batch"] = pipeline.batch;
  out["queue"] = pipeline.queue_depth;
  out["workers"] = pipeline.workers;
  out["batch_bytes"] = estimate.batch_bytes;
  out["queue_bytes"] = estimate.queue_bytes;
  out["in_flight_bytes"] = estimate.in_flight_bytes;
  out["consumer_bytes"] = estimate.consumer_bytes;
  out["total_bytes"] = estimate.total_bytes;
  out["budget_bytes"] = optional_json(pipeline.budget);
  out["max_queue_for_budget"] = optional_json(estimate.max_queue_for_budget);
  out["fits_budget"] = pipeline.budget ? nlohmann::ordered_json(estimate.total_bytes <= *pipeline.budget)
                                       : nlohmann::ordered_json(nullptr);
  out["budget_note"] = budget_note.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(budget_note);
  return out.dump();
}

}  // namespace plimsoll::telemetry
