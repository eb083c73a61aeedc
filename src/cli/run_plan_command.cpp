// `plimsoll run-plan TRACE -o PLAN`: a run plan packed offline from a trace of an earlier run (the packer is
// src/engine/run_packing.hpp, the file src/engine/run_plan.hpp; docs/run-plans.md). A shell: options checked and
// translated, the library packs and writes, this prints what it found.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "cli/option_values.hpp"
#include "engine/run_packing.hpp"
#include "engine/run_plan.hpp"
#include "plimsoll/error.hpp"
#include "plimsoll/estimate.hpp"
#include "plimsoll/trace.hpp"
#include "telemetry/terminal/output_file.hpp"

namespace {

struct RunPlanArgs {
  std::string trace;
  std::string output;
  std::optional<std::int64_t> through_step;  // signed: -1 is refused by name, not read as 2^64 - 1
  std::string over_live;                     // checked by parse_number; empty: not given
  std::string plus_mib;
  std::string search_work;
  std::string search_seeds;
  std::string search_patience;
  bool all_starts = false;
  bool force = false;
  bool json = false;
};

const plimsoll::cli::NumberRange kAboveZero{.minimum = 0, .minimum_excluded = true, .maximum = {}};

std::string mib(std::uint64_t bytes) {
  return fmt::format("{:.2f} MiB", static_cast<double>(bytes) / static_cast<double>(1ull << 20));
}

plimsoll::engine::RunPlanRequest request_of(const RunPlanArgs& args) {
  plimsoll::engine::RunPlanRequest request;
  request.through_step = args.through_step;
  if (!args.over_live.empty()) {
    request.over_live = plimsoll::cli::parse_number(args.over_live, "--limit-over-live", kAboveZero);
  }
  if (!args.plus_mib.empty()) {
    request.plus_mib = plimsoll::cli::parse_number(args.plus_mib, "--limit-plus-mib", kAboveZero);
  }
  if (!args.search_work.empty()) request.search.work = plimsoll::parse_count(args.search_work, "--search-work");
  if (!args.search_seeds.empty()) request.search.seeds = plimsoll::parse_count(args.search_seeds, "--search-seeds", 1);
  if (!args.search_patience.empty()) {
    request.search.patience = plimsoll::parse_count(args.search_patience, "--search-patience", 1);
  }
  request.search.all_starts = args.all_starts;
  request.force = args.force;
  return request;
}

void print_text(const RunPlanArgs& args, const plimsoll::Trace& trace, const plimsoll::engine::PackedRunPlan& packed) {
  const plimsoll::engine::RunPacking& p = packed.packing;
  const std::string through =
      args.through_step ? fmt::format("through step {}", *args.through_step) : std::string("whole");
  fmt::print("run plan of {} ({}): {} events, {} requests\n", trace.origin, through, packed.events, p.requests);
  fmt::print("  limit        {} ({} granules of 2 MiB; peak live {})\n", mib(packed.plan.limit),
             packed.limit_granules, mib(packed.peak_live));
  fmt::print("  lower bound  {} granules (the most live at once: {})\n", p.max_load_granules, mib(p.max_load));
  fmt::print("  best greedy  {} granules ({})\n", p.greedy_granules, p.greedy_name);
  fmt::print("  packed       {} granules, footprint {}, in {:.1f} s (search {:.1f} s)\n", p.granules,
             mib(p.footprint), packed.seconds, p.search_ms / 1000);
  if (packed.fits) {
    fmt::print("  fits the limit, {} granule{} to spare\n", packed.limit_granules - p.granules,
               packed.limit_granules - p.granules == 1 ? "" : "s");
  } else {
    fmt::print("  WARNING: does not fit the limit: {} granules over; a follower at this limit runs out of memory "
               "(written because of --force)\n",
               p.granules - packed.limit_granules);
  }
  fmt::print("written: {} ({} entries, read back equal)\n", args.output, packed.plan.entries.size());
}

nlohmann::json to_json(const RunPlanArgs& args, const plimsoll::Trace& trace,
                       const plimsoll::engine::PackedRunPlan& packed) {
  const plimsoll::engine::RunPacking& p = packed.packing;
  return {{"trace", trace.origin},
          {"plan", args.output},
          {"through_step", args.through_step ? nlohmann::json(*args.through_step) : nlohmann::json(nullptr)},
          {"events", packed.events},
          {"requests", p.requests},
          {"peak_live_bytes", packed.peak_live},
          {"limit_bytes", packed.plan.limit},
          {"limit_granules", packed.limit_granules},
          {"max_load_bytes", p.max_load},
          {"lower_bound_granules", p.max_load_granules},
          {"greedy_granules", p.greedy_granules},
          {"greedy_packing", p.greedy_name},
          {"granules", p.granules},
          {"footprint_bytes", p.footprint},
          {"fits", packed.fits},
          {"seconds", packed.seconds},
          {"search_seconds", p.search_ms / 1000}};
}

void run_run_plan(const RunPlanArgs& args) {
  // Checked before the trace is read and packed (minutes on a whole trace): a typo fails at once.
  const plimsoll::engine::RunPlanRequest request = request_of(args);
  plimsoll::telemetry::check_writable(args.output, "-o");
  const plimsoll::Trace trace = plimsoll::read_trace(args.trace);
  const plimsoll::engine::PackedRunPlan packed =
      plimsoll::engine::pack_run_plan(trace, request, [](const std::string& line) {
        std::fprintf(stderr, "run-plan: %s\n", line.c_str());
        std::fflush(stderr);
      });
  plimsoll::engine::save_run_plan(packed.plan, args.output);
  if (args.json) {
    fmt::print("{}\n", to_json(args, trace, packed).dump());
  } else {
    print_text(args, trace, packed);
  }
}

}  // namespace

void add_run_plan_command(CLI::App& app) {
  auto args = std::make_shared<RunPlanArgs>();
  CLI::App* command = app.add_subcommand(
      "run-plan", "Pack a run plan offline from a trace of an earlier run: every request through a step placed so "
                  "the run fits a limit, for a later run of the same job to follow (docs/run-plans.md)");
  command->add_option("trace", args->trace, "The trace of an earlier run (any format plimsoll reads)")->required();
  command->add_option("-o,--output", args->output, "Where to write the plan (replaced whole)")
      ->required()
      ->type_name("PLAN");
  command->add_option("--through-step", args->through_step,
                      "Pack events from the first through this step's end (an index into the trace's steps; "
                      "default: the whole trace)")
      ->type_name("N");
  CLI::Option* over = command
                           ->add_option("--limit-over-live", args->over_live,
                                        "Limit: X times the trace's peak live bytes (with neither limit option: the "
                                        "issue-16 target's, peak live + 4 MiB up to 1 GiB live, 1.01 x above)")
                           ->type_name("X");
  command->add_option("--limit-plus-mib", args->plus_mib, "Limit: the trace's peak live bytes + M MiB")
      ->type_name("M")
      ->excludes(over);
  command->add_option("--search-work", args->search_work,
                      "The search's budget in work units per seed and start (0: greedy packings alone; default "
                      "50000000)")
      ->type_name("U");
  command->add_option("--search-seeds", args->search_seeds, "Searches, one seed each; the best kept (default 1)")
      ->type_name("K");
  command->add_option("--search-patience", args->search_patience,
                      "A search stops after this many moves in a row that lower nothing (default 5000)")
      ->type_name("P");
  command->add_flag("--search-all-starts", args->all_starts,
                    "Search from every greedy packing, not only the one covering the fewest granules");
  command->add_flag("--force", args->force,
                    "Write the plan even when it does not fit the limit (a warning says so); without it, such a "
                    "plan is refused and nothing is written");
  command->add_flag("--json", args->json, "One JSON object (docs/run-plans.md lists the keys) instead of the text");
  command->callback([args] { run_run_plan(*args); });
}
