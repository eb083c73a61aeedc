// rank_report_json and rank_report_of (rank_report.hpp): the keys of a rank's report, spelled once.
#include "train/rank_report.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "plimsoll/error.hpp"

namespace plimsoll::train {
namespace {

// Each field with its key: writing and reading walk the same list.
template <class Report, class Visit>
void fields(Report& r, Visit&& visit) {
  visit("rank", r.rank);
  visit("pid", r.pid);
  visit("host", r.host);
  visit("device", r.device);
  visit("limit_bytes", r.limit_bytes);
  visit("in_use_bytes", r.in_use_bytes);
  visit("peak_in_use_bytes", r.peak_in_use_bytes);
  visit("reserved_bytes", r.reserved_bytes);
  visit("peak_reserved_bytes", r.peak_reserved_bytes);
  visit("leak", r.leak);
  visit("leak_verdict", r.leak_verdict);
  visit("leak_bytes_per_step", r.leak_bytes_per_step);
  visit("replica_checks", r.replica_checks);
  visit("step_seconds", r.step_seconds);
  visit("all_reduce_seconds", r.all_reduce_seconds);
}

}  // namespace

std::string rank_report_json(const RankReport& report) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  fields(report, [&](const char* key, const auto& value) { out[key] = value; });
  return out.dump();
}

RankReport rank_report_of(const std::string& json) {
  RankReport report;
  try {
    const nlohmann::json in = nlohmann::json::parse(json);
    fields(report, [&](const char* key, auto& value) { in.at(key).get_to(value); });
  } catch (const nlohmann::json::exception& error) {
    throw InvalidState(fmt::format("a rank's report could not be read ({}): are all ranks the same plimsoll build?",
                                   error.what()));
  }
  return report;
}

}  // namespace plimsoll::train
