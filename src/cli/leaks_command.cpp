// `plimsoll leaks TRACE`: the leak watch on a recorded trace. Says whether memory that outlives its training step
// keeps piling up (a leak) or stopped growing (warm-up), and which allocations hold it (docs/leaks.md).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/leak_text.hpp"
#include "cli/output.hpp"
#include "plimsoll/size.hpp"
#include "plimsoll/trace.hpp"
#include "telemetry/leaks/leak_watch.hpp"
#include "telemetry/reports/report_json.hpp"

namespace {

using plimsoll::telemetry::LeakGroup;
using plimsoll::telemetry::LeakReport;
using plimsoll::telemetry::LeakVerdict;

// The human report lists the groups holding the most bytes; --json lists them all.
constexpr std::size_t kShownGroups = 10;

struct LeaksArgs {
  std::string trace;
  bool json = false;
};

std::string step_range(const LeakGroup& group) {
  return group.first_step == group.last_step ? fmt::format("{}", group.first_step)
                                             : fmt::format("{}-{}", group.first_step, group.last_step);
}

std::string name_in(const std::vector<std::string>& names, std::size_t index) {
  return index < names.size() ? names[index] : fmt::format("#{}", index);
}

std::string size_range(const LeakGroup& group) {
  return group.smallest == group.largest ? plimsoll::format_size(group.smallest)
                                         : fmt::format("{} - {}", plimsoll::format_size(group.smallest),
                                                       plimsoll::format_size(group.largest));
}

void print_human(const plimsoll::Trace& trace, const LeakReport& report) {
  fmt::print("{}\n", plimsoll::cli::leak_verdict_line(report));
  // Steps not from markers: say how they were found (or why there are none), so the verdict can be weighed.
  if (trace.step_source != plimsoll::StepSource::markers) fmt::print("steps: {}\n", trace.step_detection.summary);
  if (report.steps == 0) return;
  fmt::print("first step (warm-up) keeps {} live; made later and kept past the next step: {} in {} allocations\n",
             plimsoll::format_size(report.warmup_bytes), plimsoll::format_size(report.retained_bytes),
             report.retained_allocations);
  if (report.groups.empty()) return;

  using Align = plimsoll::cli::Table::Align;
  plimsoll::cli::Table table({{"bytes", Align::right},
                              {"allocations", Align::right},
                              {"sizes", Align::right},
                              {"tag", Align::left},
                              {"made at", Align::left},
                              {"steps", Align::left}});
  for (std::size_t i = 0; i < report.groups.size() && i < kShownGroups; ++i) {
    const LeakGroup& group = report.groups[i];
    table.add_row({plimsoll::format_size(group.bytes), fmt::format("{}", group.allocations), size_range(group),
                   group.tag == 0 ? "-" : name_in(trace.tags, group.tag), plimsoll::cli::where_made(group, trace),
                   step_range(group)});
  }
  fmt::print("\nkept past the next step, by where it was made:\n{}", table.render());
  if (report.groups.size() > kShownGroups) {
    fmt::print("... and {} more groups (--json lists them all)\n", report.groups.size() - kShownGroups);
  }
}

void run_leaks(const LeaksArgs& args) {
  const plimsoll::Trace trace = plimsoll::read_trace(args.trace);
  const LeakReport report = plimsoll::telemetry::find_leaks(trace);
  if (args.json) {
    fmt::print("{}\n", plimsoll::telemetry::leak_report_json(trace, report));
    return;
  }
  print_human(trace, report);
}

}  // namespace

void add_leaks_command(CLI::App& app) {
  auto args = std::make_shared<LeaksArgs>();
  CLI::App* leaks = app.add_subcommand("leaks", "Find allocations that outlive their training step and pile up, "
                                                "and tell a leak from warm-up growth");
  leaks->add_option("trace", args->trace, "Trace file (any format `plimsoll replay` reads); steps come from its "
                                          "'step N begin' / 'step N end' markers, or, without markers, from the "
                                          "repeating allocation pattern")
      ->required();
  leaks->add_flag("--json", args->json, "One JSON object instead of the report (keys in docs/leaks.md)");
  leaks->callback([args] { run_leaks(*args); });
}
