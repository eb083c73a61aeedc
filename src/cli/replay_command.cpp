// `plimsoll replay`: runs allocation traces through a device under one or more policies and reports what each
// policy costs (peaks against live bytes, map/unmap traffic, OOMs, time per operation).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "cli/option_values.hpp"
#include "cli/output.hpp"
#include "plimsoll/device.hpp"
#include "plimsoll/error.hpp"
#include "plimsoll/estimate.hpp"
#include "plimsoll/policy.hpp"
#include "plimsoll/runtime.hpp"
#include "plimsoll/size.hpp"
#include "plimsoll/trace.hpp"
#include "telemetry/render/chrome_trace.hpp"
#include "telemetry/terminal/output_file.hpp"
#include "telemetry/terminal/progress_bar.hpp"
#include "telemetry/replay/replay.hpp"
#include "telemetry/traces/repeat_step.hpp"
#include "telemetry/reports/report_json.hpp"
#include "telemetry/replay/timeline.hpp"
#include "telemetry/render/timeline_html.hpp"
#include "telemetry/render/timeline_svg.hpp"

namespace {

using plimsoll::telemetry::ReplayResult;
using plimsoll::telemetry::Timeline;

// How often the replay reports its progress: often enough for a smooth bar, rarely enough to cost nothing.
constexpr std::size_t kProgressEveryEvents = 4096;

struct ReplayArgs {
  std::vector<std::string> traces;
  std::string device = "sim:16GiB";
  std::string policy;
  std::vector<std::string> compare;
  std::string memory_limit;
  std::string memory_fraction;  // a share of the device in (0, 1], checked by parse_number (cli/option_values.hpp)
  std::string limit_over_live;  // a factor above 0, checked by parse_number (cli/option_values.hpp)
  std::string limit_plus_mib;   // MiB above each trace's peak live bytes, above 0, checked the same way
  std::string run_plan;         // a run plan file (plimsoll run-plan) loaded on every run's device; empty: none
  bool touch_memory = false;
  bool no_step_plan = false;
  std::string repeat_last_step;  // extra copies of each trace's last step (none: the trace as recorded)
  bool json = false;
  // Memory timeline files; empty when not asked for.
  std::string plot;
  std::string html;
  std::string chrome_trace;
  // Which of the optional options were given (CLI11 fills these after parsing).
  CLI::Option* memory_fraction_option = nullptr;
  CLI::Option* limit_over_live_option = nullptr;
  CLI::Option* limit_plus_mib_option = nullptr;
};

// The folder replayed when no trace is named: PLIMSOLL_TRACE_DIR, else the shared traces beside the source
// tree this binary was built from (the README's main job).
std::filesystem::path default_trace_dir() {
  const char* from_env = std::getenv("PLIMSOLL_TRACE_DIR");
  return from_env != nullptr && *from_env != '\0' ? std::filesystem::path(from_env)
                                                  : std::filesystem::path(PLIMSOLL_DEFAULT_TRACE_DIR);
}

std::vector<std::string> traces_in(const std::filesystem::path& dir) {
  const auto unusable = [&dir](const std::string& why) {
    return plimsoll::InvalidArgument(fmt::format("no trace given, and the default trace folder {} {}; name trace "
                                                 "files, or set PLIMSOLL_TRACE_DIR to a folder of .trace files",
                                                 dir.string(), why));
  };
  std::error_code error;
  std::vector<std::string> traces;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    if (entry.is_regular_file() && entry.path().extension() == ".trace") traces.push_back(entry.path().string());
  }
  if (error) throw unusable(fmt::format("cannot be read ({})", error.message()));
  if (traces.empty()) throw unusable("holds no .trace file");
  std::sort(traces.begin(), traces.end());
  return traces;
}

std::vector<plimsoll::Growth> growths_to_run(const ReplayArgs& args) {
  std::vector<plimsoll::Growth> growths;
  for (const std::string& name : args.compare) {
    growths.push_back(plimsoll::cli::for_option("--compare", [&] { return plimsoll::parse_growth(name); }));
  }
  if (!growths.empty()) return growths;
  if (!args.policy.empty()) {
    return {plimsoll::cli::for_option("--policy", [&] { return plimsoll::parse_growth(args.policy); })};
  }
  // The main job (no trace named) compares the policies; a named trace gets the default policy alone.
  if (args.traces.empty()) return {plimsoll::Growth::preallocate, plimsoll::Growth::on_demand};
  return {plimsoll::Policy{}.growth};
}

plimsoll::Policy base_policy(const ReplayArgs& args) {
  plimsoll::Policy policy;
  if (!args.memory_limit.empty()) {
    policy.memory_limit =
        plimsoll::cli::for_option("--memory-limit", [&] { return plimsoll::parse_size(args.memory_limit); });
  }
  if (args.memory_fraction_option->count() > 0) {
    policy.memory_fraction = plimsoll::cli::parse_number(
        args.memory_fraction, "--memory-fraction", {.minimum = 0, .minimum_excluded = true, .maximum = 1});
  }
  return policy;
}

std::uint64_t limit_over_live(double factor, const plimsoll::Trace& trace) {
  const double limit = std::ceil(factor * static_cast<double>(trace.peak_live_bytes));
  if (limit >= static_cast<double>(std::numeric_limits<std::uint64_t>::max())) {
    throw plimsoll::InvalidArgument(fmt::format(
        "--limit-over-live {} gives a limit past 2^64 bytes for {}; use a smaller factor", factor, trace.origin));
  }
  return static_cast<std::uint64_t>(limit);
}

// Peak live + `mib` MiB, rounded up to a byte: the limit issue 16's target sets the small traces (bench/run_bound's
// limit_bytes, which `plimsoll run-plan` packs against, computes the same).
std::uint64_t limit_plus_mib(double mib, const plimsoll::Trace& trace) {
  const double limit = static_cast<double>(trace.peak_live_bytes) + mib * 1048576.0;
  if (limit >= static_cast<double>(std::numeric_limits<std::uint64_t>::max())) {
    throw plimsoll::InvalidArgument(fmt::format(
        "--limit-plus-mib {} gives a limit past 2^64 bytes for {}; use fewer MiB", mib, trace.origin));
  }
  return static_cast<std::uint64_t>(std::ceil(limit));
}

bool wants_timelines(const ReplayArgs& args) {
  return !args.plot.empty() || !args.html.empty() || !args.chrome_trace.empty();
}

// Fails before any trace is read: a typo in an output path must not cost a long replay.
void check_output_paths(const ReplayArgs& args) {
  if (!args.plot.empty()) plimsoll::telemetry::check_writable(args.plot, "--plot");
  if (!args.html.empty()) plimsoll::telemetry::check_writable(args.html, "--html");
  if (!args.chrome_trace.empty()) plimsoll::telemetry::check_writable(args.chrome_trace, "--chrome-trace");
}

void write_timelines(const ReplayArgs& args, const std::vector<Timeline>& timelines) {
  using namespace plimsoll::telemetry;
  if (!args.plot.empty()) write_output_file(args.plot, timeline_svg(timelines), "--plot");
  if (!args.html.empty()) write_output_file(args.html, timeline_html(timelines), "--html");
  if (!args.chrome_trace.empty()) write_output_file(args.chrome_trace, chrome_trace_json(timelines), "--chrome-trace");
}

// The bar goes to a terminal only: a log file or a pipe reading the JSON must not see carriage returns.
void start_progress_bar(std::optional<plimsoll::telemetry::ProgressBar>& bar, std::string label,
                        std::size_t events) {
  using plimsoll::telemetry::ProgressBar;
  if (!plimsoll::telemetry::stderr_is_terminal()) return;
  const auto to_stderr = [](std::string_view text) {
    std::fwrite(text.data(), 1, text.size(), stderr);
    std::fflush(stderr);
  };
  bar.emplace(std::move(label), events, to_stderr, plimsoll::telemetry::steady_seconds,
              ProgressBar::Options{.width = plimsoll::telemetry::stderr_columns()});
}

// What one run needs besides the policy: its place in the sequence (for the bar) and, when timelines are
// asked for, where its timeline goes.
struct RunContext {
  std::size_t run = 0;
  std::size_t runs = 0;
  bool log_device = false;
  std::vector<Timeline>* timelines = nullptr;
};

ReplayResult run_one(const ReplayArgs& args, const plimsoll::Trace& trace, const plimsoll::Policy& policy,
                     const RunContext& context) {
  plimsoll::Config config;
  config.default_policy = policy;
  config.log_device_creation = context.log_device;
  // A fresh runtime per run: every policy starts from an empty device, and peaks belong to this run alone.
  plimsoll::Runtime runtime(config);
  plimsoll::Allocator& allocator = runtime.device(args.device);
  if (args.no_step_plan) allocator.set_step_plan(false);
  // The maps a run plan makes when loaded (its granules, mapped ahead) are the run's: counted in `maps` below,
  // though replay's own count starts after the load.
  std::uint64_t load_maps = 0;
  std::uint64_t load_unmaps = 0;
  if (!args.run_plan.empty()) {
    const plimsoll::Stats before_load = allocator.stats();
    // Ignored for another granule or a higher limit (the device then replays as without it), said on stderr, so a
    // JSON consumer reading stdout still gets its line; run_plan.loaded in the result says so too.
    if (const std::string why = allocator.set_run_plan(args.run_plan); !why.empty())
      fmt::print(stderr, "plimsoll: {}: run plan ignored: {}\n", allocator.description().name, why);
    const plimsoll::Stats loaded = allocator.stats();
    load_maps = loaded.maps - before_load.maps;
    load_unmaps = loaded.unmaps - before_load.unmaps;
  }

  std::optional<plimsoll::telemetry::TimelineRecorder> recorder;
  if (context.timelines != nullptr) recorder.emplace(trace);
  std::optional<plimsoll::telemetry::ProgressBar> bar;
  start_progress_bar(bar,
                     fmt::format("[{}/{}] {} {}", context.run, context.runs,
                                 std::filesystem::path(trace.origin).filename().string(),
                                 plimsoll::to_string(policy.growth)),
                     trace.events.size());
  plimsoll::telemetry::ReplayOptions options{.touch_memory = args.touch_memory};
  if (recorder) options.timeline = &*recorder;
  if (bar) {
    options.progress = [&bar](std::size_t done) { bar->update(done); };
    options.progress_every = kProgressEveryEvents;
  }
  ReplayResult result = plimsoll::telemetry::replay(trace, allocator, options);
  result.maps += load_maps;
  result.unmaps += load_unmaps;
  if (bar) bar->finish();
  if (recorder) context.timelines->push_back(recorder->finish(result));
  return result;
}

plimsoll::cli::Table results_table() {
  using Align = plimsoll::cli::Table::Align;
  return plimsoll::cli::Table({{"trace", Align::left},
                               {"policy", Align::left},
                               {"peak live", Align::right},
                               {"peak in use", Align::right},
                               {"peak reserved", Align::right},
                               {"reserved/live", Align::right},
                               {"maps", Align::right},
                               {"unmaps", Align::right},
                               {"steady maps", Align::right},
                               {"steady unmaps", Align::right},
                               {"planned", Align::right},
                               {"OOM", Align::left},
                               {"ns/op", Align::right}});
}

// Requests placed by the plan, of those made while one was active (a transition plan's too); "-" when no plan was
// packed.
std::string planned_cell(const plimsoll::StepPlanStats& plan) {
  if (plan.plans + plan.transitions == 0) return plan.unfit > 0 ? "unfit" : "-";
  return fmt::format("{}/{}", plan.followed, plan.followed + plan.fallbacks());
}

// What the run plan placed and where it ended, for the runs that loaded one.
std::string run_plan_note(const ReplayResult& result) {
  const plimsoll::RunPlanStats& run = result.run_plan;
  std::string text = fmt::format("{} ({}): placed {} of the plan's {} requests", std::filesystem::path(result.trace).filename().string(),
                                 result.policy, run.placed, run.entries);
  if (run.active()) return text + "; still active at the end";
  return text + fmt::format("; ended at request {} ({})", run.ended_at, plimsoll::to_string(run.ended_by));
}

// Why requests left the plan, for the traces where some did.
std::string fallback_note(const ReplayResult& result) {
  const plimsoll::StepPlanStats& plan = result.step_plan;
  return fmt::format("{} ({}): {} plan(s) followed, {} packed but over the limit; last {} (its step's live peak "
                     "{}); {} followed, {} fell back: {} not in the plan, {} range still occupied, {} over the limit, "
                     "{} past the plan's end; {} planned skipped; {} growth left to best fit; {} pack(s), {:.1f} ms; "
                     "{} transition step(s) ({} given up): {} followed, {}/{} maps/unmaps; {} plan step(s) given up to best fit",
                     std::filesystem::path(result.trace).filename().string(), result.policy, plan.plans, plan.unfit,
                     plimsoll::format_size(plan.plan_bytes), plimsoll::format_size(plan.plan_peak_bytes),
                     plan.followed, plan.fallbacks(), plan.not_in_plan, plan.occupied, plan.over_limit,
                     plan.past_plan, plan.skipped, plan.growth, plan.packs, static_cast<double>(plan.pack_ns) / 1e6,
                     plan.transitions, plan.transitions_abandoned, plan.transition_followed, plan.transition_maps,
                     plan.transition_unmaps, plan.steps_given_up);
}

// The steps that mapped or unmapped, by the trace's step numbers, and from which step on none did:
// "steps 0 (3/0), 1 (2/1); none in steps 2-6".
std::string step_traffic_note(const ReplayResult& result, const plimsoll::Trace& trace) {
  const auto number = [&trace](std::size_t k) {
    return k < trace.steps.size() ? trace.steps[k].number : static_cast<int>(k);
  };
  std::string busy;
  std::size_t quiet_from = 0;
  for (std::size_t k = 0; k < result.maps_by_step.size(); ++k) {
    if (result.maps_by_step[k] + result.unmaps_by_step[k] == 0) continue;
    busy += fmt::format("{}{} ({}/{})", busy.empty() ? "" : ", ", number(k), result.maps_by_step[k],
                        result.unmaps_by_step[k]);
    quiet_from = k + 1;
  }
  const std::size_t reached = result.maps_by_step.size();
  std::string text = fmt::format("{} ({}): ", std::filesystem::path(result.trace).filename().string(), result.policy);
  text += busy.empty() ? "no step mapped or unmapped" : "steps " + busy;
  if (quiet_from < reached) {
    text += fmt::format("; none in steps {}-{}", number(quiet_from), number(reached - 1));
  } else {
    text += "; the last step mapped or unmapped too";
  }
  if (result.oom) {
    const bool in_teardown = !trace.steps.empty() && result.oom_event && *result.oom_event >= trace.steps.back().end;
    text += in_teardown ? std::string(" (ran out of memory in the teardown, after the last step)")
                        : fmt::format(" (ran out of memory in step {})", number(reached - 1));
  }
  return text;
}

std::vector<std::string> table_row(const ReplayResult& result) {
  const std::string oom =
      result.oom ? fmt::format("at event {} (line {})", result.oom_event.value_or(0), result.oom_line) : "no";
  return {std::filesystem::path(result.trace).filename().string(),
          result.policy,
          plimsoll::format_size(result.peak_live_bytes),
          plimsoll::format_size(result.peak_in_use_bytes),
          plimsoll::format_size(result.peak_reserved_bytes),
          fmt::format("{:.2f}", result.reserved_over_live),
          fmt::format("{}", result.maps),
          fmt::format("{}", result.unmaps),
          fmt::format("{}", result.steady_maps),
          fmt::format("{}", result.steady_unmaps),
          planned_cell(result.step_plan),
          oom,
          fmt::format("{:.1f}", result.ns_per_op)};
}

// One line per policy under the table: what a reader compares first.
struct PolicySummary {
  std::string policy;
  std::size_t traces = 0;
  std::size_t ooms = 0;
  std::size_t steady_traffic = 0;  // traces with a map or unmap after the first step
  double low = std::numeric_limits<double>::infinity();  // reserved/live over the traces that ran to the end
  double high = 0;

  std::string line() const {
    const std::size_t completed = traces - ooms;
    std::string text = fmt::format("{}: {} traces", policy, traces);
    if (completed > 0) {
      text += fmt::format(", reserved/live {:.2f}-{:.2f}", low, high);
      if (ooms > 0) text += fmt::format(" over the {} that ran to the end", completed);
    }
    text += ooms == 0 ? ", no OOM" : fmt::format(", {} ran out of memory", ooms);
    text += fmt::format("; {} map or unmap after the first step", steady_traffic);
    return text;
  }
};

void add_to_summary(std::vector<PolicySummary>& summaries, const ReplayResult& result) {
  auto found = std::find_if(summaries.begin(), summaries.end(),
                            [&](const PolicySummary& summary) { return summary.policy == result.policy; });
  if (found == summaries.end()) found = summaries.insert(summaries.end(), PolicySummary{.policy = result.policy});
  PolicySummary& summary = *found;
  ++summary.traces;
  if (result.steady_maps + result.steady_unmaps > 0) ++summary.steady_traffic;
  if (result.oom) {
    ++summary.ooms;
    return;
  }
  summary.low = std::min(summary.low, result.reserved_over_live);
  summary.high = std::max(summary.high, result.reserved_over_live);
}

void run_replay(const ReplayArgs& args) {
  // Checked before any trace is read, so a typo fails at once rather than after a long load.
  check_output_paths(args);
  plimsoll::cli::for_option("--device", [&] { return plimsoll::DeviceName::parse(args.device); });
  const std::vector<plimsoll::Growth> growths = growths_to_run(args);
  const plimsoll::Policy policy = base_policy(args);
  policy.validate();
  // Above 0 when given (parse_number refuses 0); 0: not given.
  const double over_live = args.limit_over_live_option->count() > 0
                               ? plimsoll::cli::parse_number(args.limit_over_live, "--limit-over-live",
                                                             {.minimum = 0, .minimum_excluded = true, .maximum = {}})
                               : 0.0;
  const double plus_mib = args.limit_plus_mib_option->count() > 0
                              ? plimsoll::cli::parse_number(args.limit_plus_mib, "--limit-plus-mib",
                                                            {.minimum = 0, .minimum_excluded = true, .maximum = {}})
                              : 0.0;
  // Checked before any trace is read; 0 (the default) replays each trace as recorded.
  const std::size_t repeats =
      args.repeat_last_step.empty() ? 0 : plimsoll::parse_count(args.repeat_last_step, "--repeat-last-step");
  plimsoll::telemetry::check_step_repeats(repeats);
  const std::vector<std::string> traces = args.traces.empty() ? traces_in(default_trace_dir()) : args.traces;

  plimsoll::cli::Table table = results_table();
  std::vector<ReplayResult> out_of_memory;
  std::vector<PolicySummary> summaries;
  // One trace in memory at a time: a 10M-event trace takes a few hundred MB once parsed.
  // Every run creates its device afresh; its "created device" line is printed once per distinct device.
  std::vector<std::pair<plimsoll::Growth, std::optional<std::uint64_t>>> logged;
  std::vector<Timeline> timelines;
  std::vector<std::string> step_notes;  // how the steps of traces without markers were found
  std::vector<std::string> plan_notes;  // step-aware placement, per run that packed a plan
  std::vector<std::string> run_plan_notes;  // run plans, per run that loaded one
  std::vector<std::string> step_traffic_notes;  // in which steps each run mapped or unmapped
  const std::size_t runs = traces.size() * growths.size();
  std::size_t run = 0;
  for (const std::string& path : traces) {
    const plimsoll::Trace trace =
        plimsoll::telemetry::repeat_last_step(plimsoll::read_trace(path), repeats);
    if (trace.step_source != plimsoll::StepSource::markers) {
      step_notes.push_back(fmt::format("{}: {}", trace.origin, trace.step_detection.summary));
    }
    for (const plimsoll::Growth growth : growths) {
      plimsoll::Policy run_policy = policy;
      run_policy.growth = growth;
      if (over_live > 0) run_policy.memory_limit = limit_over_live(over_live, trace);
      if (plus_mib > 0) run_policy.memory_limit = limit_plus_mib(plus_mib, trace);
      run_policy.validate();
      const std::pair<plimsoll::Growth, std::optional<std::uint64_t>> device_kind{growth, run_policy.memory_limit};
      const bool log_device = !args.json && std::find(logged.begin(), logged.end(), device_kind) == logged.end();
      if (log_device) logged.push_back(device_kind);
      const RunContext context{.run = ++run,
                               .runs = runs,
                               .log_device = log_device,
                               .timelines = wants_timelines(args) ? &timelines : nullptr};
      ReplayResult result = run_one(args, trace, run_policy, context);
      if (args.json) {
        fmt::print("{}\n", plimsoll::telemetry::replay_result_json(result));
        std::fflush(stdout);  // a consumer sees each run as it finishes
        continue;
      }
      table.add_row(table_row(result));
      if (result.step_plan.plans + result.step_plan.unfit + result.step_plan.transitions > 0) plan_notes.push_back(fallback_note(result));
      if (result.run_plan.loaded) run_plan_notes.push_back(run_plan_note(result));
      // Only where steady state mapped or unmapped: a clean run says so in the table already.
      if (result.steady_maps + result.steady_unmaps > 0 && !result.maps_by_step.empty()) {
        step_traffic_notes.push_back(step_traffic_note(result, trace));
      }
      add_to_summary(summaries, result);
      if (result.oom) out_of_memory.push_back(std::move(result));
    }
  }
  write_timelines(args, timelines);
  if (args.json) return;

  fmt::print("{}", table.render());
  if (!step_notes.empty()) {
    fmt::print("\nsteps (steady maps count from the end of the first):\n");
    for (const std::string& note : step_notes) fmt::print("{}\n", note);
  }
  if (!step_traffic_notes.empty()) {
    fmt::print("\nmaps/unmaps by step, where steady state had any (the boundary that opens a step counts in it):\n");
    for (const std::string& note : step_traffic_notes) fmt::print("{}\n", note);
  }
  if (!plan_notes.empty()) {
    fmt::print("\nstep-aware placement (planned: requests placed at their planned address, of those made while a "
               "plan was active):\n");
    for (const std::string& note : plan_notes) fmt::print("{}\n", note);
  }
  if (!run_plan_notes.empty()) {
    fmt::print("\nrun plan (requests placed at their planned address from the first allocation; the request that "
               "ended it and why):\n");
    for (const std::string& note : run_plan_notes) fmt::print("{}\n", note);
  }
  if (traces.size() > 1) {
    fmt::print("\n");
    for (const PolicySummary& summary : summaries) fmt::print("{}\n", summary.line());
  }
  for (const ReplayResult& result : out_of_memory) {
    fmt::print("\n{} with {} ran out of memory at line {}:\n{}\n", result.trace, result.policy, result.oom_line,
               result.oom_message);
  }
  for (const std::string* file : {&args.plot, &args.html, &args.chrome_trace}) {
    if (!file->empty()) fmt::print("\nmemory timeline: {}", *file);
  }
  if (wants_timelines(args)) fmt::print("\n");
}

}  // namespace

void add_replay_command(CLI::App& app) {
  auto args = std::make_shared<ReplayArgs>();
  CLI::App* replay = app.add_subcommand("replay", "Replay allocation traces against a device and report peaks, "
                                                  "map/unmap traffic and OOMs per policy");
  replay->add_option("traces", args->traces,
                     "Trace files, told apart by content: plimsoll recordings, the text format ('a <id> <bytes>', "
                     "'f <id>', '# marker') or RMM's logging CSV (docs/trace-readers.md). None: every .trace in "
                     "$PLIMSOLL_TRACE_DIR or, unset, " PLIMSOLL_DEFAULT_TRACE_DIR ", under preallocate and on_demand");
  replay->add_option("--device", args->device, "Device to replay on: cpu, cuda:N or sim:SIZE")
      ->capture_default_str();
  CLI::Option* policy = replay->add_option("--policy", args->policy, "Growth policy: preallocate or on_demand "
                                                                     "(default: on_demand; both when no trace is named)");
  replay
      ->add_option("--compare", args->compare,
                   "Replay under each of these policies, comma-separated (e.g. preallocate,on_demand)")
      ->delimiter(',')
      // One value per occurrence: otherwise the option would swallow the trace paths that follow it.
      ->allow_extra_args(false)
      ->excludes(policy);
  CLI::Option* memory_limit =
      replay->add_option("--memory-limit", args->memory_limit, "Device memory limit, e.g. 8GiB");
  args->memory_fraction_option =
      replay->add_option("--memory-fraction", args->memory_fraction, "Limit as a share of the device, in (0, 1]")
          ->type_name("SHARE")
          ->excludes(memory_limit);
  args->limit_over_live_option =
      replay
          ->add_option("--limit-over-live", args->limit_over_live,
                       "Limit each trace's device to X times that trace's peak live bytes, rounded up (e.g. 1.03 "
                       "for 3% headroom over what the program holds at its peak)")
          ->type_name("X")
          ->excludes(memory_limit)
          ->excludes(args->memory_fraction_option);
  args->limit_plus_mib_option =
      replay
          ->add_option("--limit-plus-mib", args->limit_plus_mib,
                       "Limit each trace's device to that trace's peak live bytes plus M MiB (issue 16's target for "
                       "traces under 1 GiB live: 4)")
          ->type_name("M")
          ->excludes(memory_limit)
          ->excludes(args->memory_fraction_option)
          ->excludes(args->limit_over_live_option);
  replay
      ->add_option("--run-plan", args->run_plan,
                   "Load this run plan (from plimsoll run-plan) on the device before the replay: its requests go to "
                   "their planned addresses from the first allocation until one does not match (docs/engine.md, "
                   "\"Run plans\")")
      ->type_name("FILE");
  replay->add_flag("--touch-memory", args->touch_memory,
                   "Write one byte per 4 KiB page of each new block (cpu device only), so ns/op includes "
                   "first-touch page faults");
  replay->add_flag("--no-step-plan", args->no_step_plan,
                   "Turn step-aware placement off: every request takes best fit (to compare with it on)");
  replay
      ->add_option("--repeat-last-step", args->repeat_last_step,
                   "Replay each trace's last step N more times before its teardown (fresh allocations; the blocks "
                   "a step frees from the step before are the previous copy's), to see a long run's steady state")
      ->type_name("N");  // checked by parse_count and check_step_repeats, naming the fix
  replay->add_flag("--json", args->json,
                   "One JSON object per line per (trace, policy), instead of the table; no device log lines");
  replay->add_option("--plot", args->plot,
                     "Write a memory timeline chart (SVG) of every run: in use and reserved over the trace, steps, "
                     "markers, the OOM, per-tag areas when the trace has tags")
      ->type_name("FILE.svg");
  replay->add_option("--html", args->html,
                     "Write the same charts as one self-contained HTML page: zoom with the wheel or by dragging, "
                     "hover for values, double-click to reset")
      ->type_name("FILE.html");
  replay->add_option("--chrome-trace", args->chrome_trace,
                     "Write the timelines as Trace Event JSON (counter tracks and instant events) for Perfetto "
                     "(ui.perfetto.dev) or chrome://tracing")
      ->type_name("FILE.json");
  replay->callback([args] { run_replay(*args); });
}
