// The report of `plimsoll run`: the child's stats (python/plimsoll/_run_child.py writes them at exit) when there are
// any, else what the recording alone says; the leak watch on the recording; --json, --html and the text on stderr.
#include "cli/run_report.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "cli/leak_text.hpp"
#include "cli/output.hpp"
#include "plimsoll/error.hpp"
#include "plimsoll/policy.hpp"
#include "plimsoll/runtime.hpp"
#include "plimsoll/size.hpp"
#include "plimsoll/trace.hpp"
#include "telemetry/leaks/leak_watch.hpp"
#include "telemetry/terminal/output_file.hpp"
#include "telemetry/replay/replay.hpp"
#include "telemetry/replay/timeline.hpp"
#include "telemetry/render/timeline_html.hpp"

namespace plimsoll::cli {
namespace {

std::optional<nlohmann::json> read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

// Peaks from the recording alone, when the child could not write its stats.
nlohmann::ordered_json devices_from_trace(const plimsoll::Trace& trace) {
  std::map<std::uint16_t, std::pair<std::uint64_t, std::uint64_t>> in_use_peak;
  std::map<std::pair<std::uint16_t, std::uint64_t>, std::uint64_t> live;
  for (const plimsoll::TraceEvent& event : trace.events) {
    if (event.kind != plimsoll::TraceEvent::Kind::allocate && event.kind != plimsoll::TraceEvent::Kind::free) continue;
    auto& [in_use, peak] = in_use_peak[event.device];
    if (event.kind == plimsoll::TraceEvent::Kind::allocate) {
      live[{event.device, event.slot}] = event.bytes;
      in_use += event.bytes;
      peak = std::max(peak, in_use);
    } else if (event.kind == plimsoll::TraceEvent::Kind::free) {
      if (const auto found = live.find({event.device, event.slot}); found != live.end()) {
        in_use -= found->second;
        live.erase(found);
      }
    }
  }
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const auto& [device, numbers] : in_use_peak) {
    nlohmann::ordered_json entry;
    entry["device"] = device < trace.devices.size() ? trace.devices[device] : fmt::format("#{}", device);
    entry["in_use_bytes"] = numbers.first;
    entry["peak_in_use_bytes"] = numbers.second;
    entry["from"] = "recording";
    out.push_back(std::move(entry));
  }
  return out;
}

std::size_t count_notes(const std::string& run_dir, std::string_view prefix) {
  std::size_t count = 0;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(run_dir, error)) {
    if (entry.path().filename().string().rfind(prefix, 0) == 0) ++count;
  }
  return count;
}

std::string device_table(const nlohmann::ordered_json& devices) {
  plimsoll::cli::Table table = plimsoll::cli::memory_table();
  const auto size = [](const nlohmann::ordered_json& entry, const char* key) {
    return entry.contains(key) ? plimsoll::format_size(entry[key].get<std::uint64_t>()) : std::string("-");
  };
  for (const auto& device : devices) {
    const std::string name = device["device"].get<std::string>();
    if (device.contains("tags")) {
      for (const auto& tag : device["tags"]) {
        table.add_row({name, tag["tag"].get<std::string>(), size(tag, "in_use_bytes"), size(tag, "peak_in_use_bytes"),
                       "", "", ""});
      }
    }
    table.add_row({name, "all", size(device, "in_use_bytes"), size(device, "peak_in_use_bytes"),
                   size(device, "reserved_bytes"), size(device, "peak_reserved_bytes"), size(device, "limit_bytes")});
  }
  return table.render();
}

}  // namespace

int report_run(const RunOutputs& args, const ChildEnd& end, const std::string& run_dir, const std::string& recording) {
  nlohmann::ordered_json out;
  out["exit_status"] = end.exit_status;
  out["signal"] = end.signal == 0 ? nlohmann::ordered_json() : nlohmann::ordered_json(end.signal);
  const std::optional<nlohmann::json> stats = read_json(run_dir + "/stats.json");
  std::optional<plimsoll::Trace> trace;
  std::string trace_problem;
  try {
    if (std::filesystem::exists(recording) && std::filesystem::file_size(recording) > 0) trace = plimsoll::read_trace(recording);
    else trace_problem = "the program wrote no recording (plimsoll did not start in it: not a Python program?)";
  } catch (const plimsoll::Error& error) {
    trace_problem = error.what();
  }
  out["stats_lost"] = !stats.has_value();
  out["devices"] = stats ? nlohmann::ordered_json((*stats)["devices"]) : (trace ? devices_from_trace(*trace) : nlohmann::ordered_json::array());
  // The step the program's last step() began holds no training, only what ran after it (the program's teardown,
  // which frees everything, leaks included): closing the recording ended it, not a step() call. Left out.
  if (trace && stats && stats->contains("steps") && !trace->steps.empty() &&
      trace->steps.back().number == (*stats)["steps"].get<int>()) {
    trace->steps.pop_back();
  }
  std::optional<plimsoll::telemetry::LeakReport> leak;
  if (trace) leak = plimsoll::telemetry::find_leaks(*trace);
  out["steps"] = leak ? leak->steps : 0;
  out["leak"] = leak && leak->leak();
  out["leak_verdict"] = leak ? plimsoll::telemetry::to_string(leak->verdict) : "too_few_steps";
  out["leak_bytes_per_step"] = leak ? leak->bytes_per_step : 0.0;
  nlohmann::ordered_json sites = nlohmann::ordered_json::array();
  if (leak && leak->leak()) {
    for (const auto& group : leak->groups) {  // most bytes first
      if (group.site == 0 || group.site >= trace->sites.size() || trace->sites[group.site].empty()) continue;
      const std::string& site = trace->sites[group.site];
      if (std::find(sites.begin(), sites.end(), site) == sites.end()) sites.push_back(site);
    }
  }
  out["leak_sites"] = std::move(sites);
  out["ooms"] = stats ? nlohmann::ordered_json((*stats)["ooms"]) : nlohmann::ordered_json::array();
  out["hooks"] = stats ? nlohmann::ordered_json((*stats)["hooks"]) : nlohmann::ordered_json();
  nlohmann::ordered_json notes = stats ? nlohmann::ordered_json((*stats)["notes"]) : nlohmann::ordered_json::array();
  if (!stats) {
    notes.push_back(end.signal != 0 ? fmt::format("the program was ended by signal {} before it could write its stats: "
                                                  "devices and peaks come from the recording", end.signal)
                                    : "the program exited without writing its stats (a crash, or an exit that "
                                      "skipped Python's shutdown): devices and peaks come from the recording");
  }
  if (!trace_problem.empty()) notes.push_back(fmt::format("recording: {}", trace_problem));
  const std::size_t forks = count_notes(run_dir, "fork-");
  const std::size_t spawned = count_notes(run_dir, "subprocess-");
  if (forks + spawned > 0) {
    notes.push_back(fmt::format("{} forked and {} started Python processes ran under the same limits, each on its own "
                                "devices; they are not in this report",
                                forks, spawned));
  }
  out["forked_processes"] = forks;
  out["started_processes"] = spawned;
  out["notes"] = notes;
  out["recording"] = args.record.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(args.record);

  int status = end.exit_status;
  try {
    if (!args.html.empty() && trace) {
      plimsoll::Config config;
      config.log_device_creation = false;
      plimsoll::Runtime runtime(config);
      plimsoll::telemetry::TimelineRecorder recorder(*trace);
      plimsoll::telemetry::ReplayOptions options;
      options.timeline = &recorder;
      const auto result = plimsoll::telemetry::replay(*trace, runtime.device("sim:1TiB"), options);
      plimsoll::telemetry::write_output_file(args.html, plimsoll::telemetry::timeline_html({recorder.finish(result)}),
                                             "--html");
    }
    if (!args.json.empty()) plimsoll::telemetry::write_output_file(args.json, out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n", "--json");
  } catch (const plimsoll::Error& error) {
    fmt::print(stderr, "plimsoll run: error: {}\n", error.what());
    status = kRunUsageStatus;
  }
  if (args.quiet) return status;

  std::string text = "\nplimsoll run: ";
  text += end.signal != 0 ? fmt::format("the program was ended by signal {}\n", end.signal)
                          : fmt::format("the program exited with status {}\n", end.exit_status);
  text += fmt::format("memory at exit (peaks over the run){}:\n{}", stats ? "" : ", from the recording",
                      device_table(out["devices"]));
  for (const auto& oom : out["ooms"]) text += fmt::format("\nout of memory:\n{}\n", oom.get<std::string>());
  if (leak) {
    text += fmt::format("\nleak watch: {}\n", plimsoll::cli::leak_verdict_line(*leak));
    for (const auto& site : out["leak_sites"]) text += fmt::format("  made at {}\n", site.get<std::string>());
  }
  for (const auto& note : out["notes"]) text += fmt::format("note: {}\n", note.get<std::string>());
  std::fflush(stdout);
  fmt::print(stderr, "{}", text);
  return status;
}


}  // namespace plimsoll::cli
