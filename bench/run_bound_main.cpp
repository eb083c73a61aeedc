// plimsoll_run_bound: can any placement of a run, knowing the entire trace, stay within a limit? Packs every
// request from the trace's first event through a step (default: the whole trace) offline with exact lifetimes
// (src/engine/run_packing.hpp: the engine's packer and search, its 256-byte rounding and 2 MiB granules) and prints the
// granules the best packing found needs against the limit with no unmaps, the same plan's peak if the follower
// unmaps as it frees (always, and through step 0 only), and the max load (no placement needs fewer granules).
//   plimsoll_run_bound [--through-step N] [--limit-over-live X | --limit-plus-mib M] [--search-work W]
//                      [--search-seeds S] [--search-patience P] [--search-all-starts] [--follow-on-heap] TRACE...
// --follow-on-heap: each plan followed on a simulated heap at the limit (follow_on_heap), with no unmaps and
// unmapping after every free; a second table.
// The limit is of the whole trace's peak live bytes, as requested: --limit-over-live as replay reads it,
// --limit-plus-mib as bench/run_step_plan.sh computes its limit (replay has no such option); with neither, the
// issue-16 target's: 1.01 x peak live over 1 GiB live, peak live + 4 MiB under (run_limit). Progress goes to stderr.
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "plimsoll/error.hpp"
#include "run_bound.hpp"

namespace {

std::string mib(std::uint64_t bytes) {
  return fmt::format("{:.2f} MiB", static_cast<double>(bytes) / static_cast<double>(1ull << 20));
}

}  // namespace

int main(int argc, char** argv) {
  const CLI::Validator above_zero(
      [](const std::string& text) {
        double value = 0;
        return CLI::detail::lexical_cast(text, value) && value > 0 ? std::string()
                                                                   : "must be a number above 0, e.g. 1.01 or 4";
      },
      "X>0");
  CLI::App app{"The whole-run bound: a trace's requests through a step, packed offline, against a limit"};
  std::vector<std::string> traces;
  std::optional<std::int64_t> through;  // signed: -1 is refused, not read as 2^64 - 1
  double over_live = 0, plus_mib = 0;
  plimsoll::engine::RunSearch search;
  app.add_option("traces", traces, "Trace files")->required();
  app.add_option("--through-step", through, "Pack events from the first through this step's end (an index into "
                                             "the trace's steps; default: the whole trace)");
  CLI::Option* over = app.add_option("--limit-over-live", over_live, "Limit: X times the trace's peak live bytes")
                          ->check(above_zero);
  app.add_option("--limit-plus-mib", plus_mib, "Limit: the trace's peak live bytes + M MiB")
      ->check(above_zero)
      ->excludes(over);
  app.add_option("--search-work", search.work, "Each search's budget in work units (0: greedy packings alone)")
      ->capture_default_str();
  app.add_option("--search-seeds", search.seeds, "Searches from the best greedy packing, one seed each; the best kept")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--search-patience", search.patience, "A search stops after this many moves in a row that lower "
                                                        "nothing")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_flag("--search-all-starts", search.all_starts,
               "Search from every greedy packing (each with every seed), not only the one covering the fewest "
               "granules");
  bool follow = false;
  app.add_flag("--follow-on-heap", follow,
               "Follow each plan on a simulated engine::Heap at the limit (Heap::allocate_at at every planned "
               "address), with no unmaps and unmapping after every free; print what it placed and mapped");
  CLI11_PARSE(app, argc, argv);
  try {
    std::vector<plimsoll::Trace> read;
    for (const std::string& path : traces) read.push_back(plimsoll::read_trace(path));
    const std::vector<plimsoll::engine::PreparedRun> runs =
        plimsoll::engine::prepare_runs(std::move(read), through, over_live, plus_mib);
    fmt::print("| trace | through | events | requests | peak live | limit | limit granules | max load (lower bound) "
               "| best greedy granules | searched granules (no unmaps) | unmapping through step 0 only "
               "| unmapping always | search ms | fits with no unmaps | over the limit by |\n");
    fmt::print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|\n");
    std::vector<std::string> followed_rows;
    for (const plimsoll::engine::PreparedRun& prepared : runs) {
      const plimsoll::Trace& trace = prepared.trace;
      const std::string name = std::filesystem::path(trace.origin).filename().string();
      const std::uint64_t limit_granules = prepared.limit / plimsoll::engine::kRunGranule;
      const plimsoll::engine::StepObservation run = plimsoll::engine::observe_run(trace, prepared.end);
      const plimsoll::engine::RunPacking b = plimsoll::engine::pack_run(
          run, search,
          [&](const std::string& line) { std::fprintf(stderr, "%s: %s\n", name.c_str(), line.c_str()); });
      const plimsoll::engine::MappedPeaks peaks =
          plimsoll::engine::mapped_peaks(run, b.plan, plimsoll::engine::kRunBase, plimsoll::engine::kRunGranule,
                                        plimsoll::engine::tick_at(trace, prepared.step0_end));
      const std::string through_text = through ? fmt::format("step {}", *through) : "whole";
      const std::int64_t over_by = static_cast<std::int64_t>(b.granules) - static_cast<std::int64_t>(limit_granules);
      const std::string over_text =
          over_by <= 0 ? std::string("-")
                       : fmt::format("{} granule{} ({} MiB)", over_by, over_by == 1 ? "" : "s", 2 * over_by);
      fmt::print("| {} | {} | {} | {} | {} | {} | {} | {} | {} ({}) | {} | {} | {} | {:.0f} | {} | {} |\n", name,
                 through_text, prepared.end, b.requests, mib(trace.peak_live_bytes), mib(prepared.limit),
                 limit_granules, b.max_load_granules, b.greedy_granules, b.greedy_name, b.granules,
                 peaks.unmap_until, peaks.unmapping, b.search_ms, over_by <= 0 ? "yes" : "no", over_text);
      std::fflush(stdout);
      if (follow) {
        const auto row = [&](bool unmap) {
          const plimsoll::bench::Followed f =
              plimsoll::bench::follow_on_heap(trace, prepared.end, b.plan, prepared.limit, unmap);
          return fmt::format("{} of {} | {} | {} / {}{}", f.placed, f.requests, f.peak_granules, f.maps, f.unmaps,
                             f.self_check.empty() ? "" : " (self check: " + f.self_check + ")");
        };
        followed_rows.push_back(fmt::format("| {} | {} | {} | {} | {} |", name, through_text, limit_granules,
                                            row(false), row(true)));
      }
    }
    if (follow) {
      fmt::print("\n| trace | through | limit granules | placed, no unmaps | peak mapped granules | maps / unmaps "
                 "| placed, unmapping after every free | peak mapped granules | maps / unmaps |\n");
      fmt::print("|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
      for (const std::string& line : followed_rows) fmt::print("{}\n", line);
    }
  } catch (const std::exception& error) {
    std::fprintf(stderr, "error: %s\n", error.what());
    return 1;
  }
  return 0;
}
