// Sentences about a leak report, shared by `plimsoll leaks` and `plimsoll train` (cli/leak_text.hpp).
#include "cli/leak_text.hpp"

#include <cmath>
#include <cstdint>

#include <fmt/format.h>

#include "plimsoll/size.hpp"

namespace plimsoll::cli {

using telemetry::LeakGroup;
using telemetry::LeakReport;
using telemetry::LeakVerdict;

namespace {

std::string rhythm(double every_steps) {
  // Growth at every step end gives exactly 1; a leak every 2nd or 3rd step gives 2 or 3.
  if (every_steps < 1.05) return "every step";
  return fmt::format("every {:.1f} steps", every_steps);
}

std::string bytes_rate(double bytes_per_step) {
  return format_size(static_cast<std::uint64_t>(std::llround(bytes_per_step)));
}

}  // namespace

std::string leak_verdict_line(const LeakReport& report) {
  switch (report.verdict) {
    case LeakVerdict::leak:
      return fmt::format("LEAK: memory kept past its step grows by {} per step ({:.1f} allocations per step, {}), "
                         "made in steps {} to {} ({} steps seen)",
                         bytes_rate(report.bytes_per_step), report.allocations_per_step,
                         rhythm(report.growth_every_steps), report.first_growth_step.value_or(0),
                         report.last_growth_step.value_or(0), report.steps);
    case LeakVerdict::warmup_growth:
      return fmt::format("no leak: memory kept past its step grew, then stopped {} steps ago (warm-up, such as a "
                         "cache that filled); {} steps",
                         report.steps_since_growth, report.steps);
    case LeakVerdict::no_growth:
      return fmt::format("no leak: nothing made after the first step outlived the step after it; {} steps",
                         report.steps);
    case LeakVerdict::too_few_steps:
      if (report.steps == 0) {
        return "no verdict: the trace has no 'step N begin' / 'step N end' markers and its allocations do not "
               "repeat step after step; mark steps with plimsoll::step() in C++ or plimsoll.step() in Python (or add the "
               "markers) so the leak watch can see them";
      }
      return fmt::format("no verdict: {} steps; more than {} are needed to tell a leak from warm-up", report.steps,
                         telemetry::LeakWatch::kMinSteps);
  }
  return "";
}

// Where the group was made, without its tag (the table and the JSON give the tag on its own).
std::string where_made(const LeakGroup& group, const Trace& trace) {
  LeakGroup untagged = group;
  untagged.tag = 0;
  return telemetry::describe_origin(untagged, trace.tags, trace.sites);
}

}  // namespace plimsoll::cli
