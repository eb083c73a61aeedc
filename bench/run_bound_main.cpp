// plimsoll_run_bound: can any placement of a run, knowing the entire trace, stay within a limit? Packs every
// request from the trace's first event through a step (default: the whole trace) offline with exact lifetimes
// (bench/run_bound.hpp: the engine's packer and search, its 256-byte rounding and 2 MiB granules) and prints the
// granules the best packing found needs against the limit, and the max load (no placement needs fewer granules).
//   plimsoll_run_bound [--through-step N] [--limit-over-live X | --limit-plus-mib M] [--search-work W]
//                      [--search-seeds S] [--search-patience P] [--search-all-starts] TRACE...
// The limit is read as replay reads it (of the whole trace's peak live bytes, as requested); with neither option,
// the issue-16 target's: 1.01 x peak live over 1 GiB live, peak live + 4 MiB under. Progress goes to stderr.
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <optional>
#include <string>
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
  std::optional<std::size_t> through;
  double over_live = 0, plus_mib = 0;
  plimsoll::bench::RunSearch search;
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
  CLI11_PARSE(app, argc, argv);
  try {
    // Every trace read and checked before any is packed: a bad last trace must not cost the others' minutes.
    std::vector<plimsoll::Trace> loaded;
    std::vector<std::size_t> ends;
    for (const std::string& path : traces) {
      loaded.push_back(plimsoll::read_trace(path));
      ends.push_back(plimsoll::bench::run_end(loaded.back(), through));
    }
    fmt::print("| trace | through | events | requests | peak live | limit | limit granules | max load (lower bound) "
               "| best greedy granules | searched granules | search ms | fits | over the limit by |\n");
    fmt::print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|\n");
    for (std::size_t t = 0; t < loaded.size(); ++t) {
      const plimsoll::Trace& trace = loaded[t];
      const std::size_t end = ends[t];
      const std::string name = std::filesystem::path(trace.origin).filename().string();
      const bool target_rule = over_live == 0 && plus_mib == 0;
      const bool large = trace.peak_live_bytes > (1ull << 30);
      const std::uint64_t limit = plimsoll::bench::limit_bytes(
          trace.peak_live_bytes, target_rule ? (large ? 1.01 : 0) : over_live,
          target_rule ? (large ? 0 : 4) : plus_mib);
      const std::uint64_t limit_granules = limit / plimsoll::bench::kRunGranule;
      const plimsoll::engine::StepObservation run = plimsoll::bench::observe_run(trace, end);
      const plimsoll::bench::RunBound b = plimsoll::bench::pack_run(
          run, search,
          [&](const std::string& line) { std::fprintf(stderr, "%s: %s\n", name.c_str(), line.c_str()); });
      const std::string through_text = through ? fmt::format("step {}", *through) : "whole";
      const std::int64_t over_by = static_cast<std::int64_t>(b.granules) - static_cast<std::int64_t>(limit_granules);
      fmt::print("| {} | {} | {} | {} | {} | {} | {} | {} | {} ({}) | {} | {:.0f} | {} | {} |\n", name, through_text,
                 end, b.requests, mib(trace.peak_live_bytes), mib(limit), limit_granules, b.max_load_granules,
                 b.greedy_granules, b.greedy_name, b.granules, b.search_ms, over_by <= 0 ? "yes" : "no",
                 over_by <= 0 ? std::string("-") : fmt::format("{} granule{} ({} MiB)", over_by, over_by == 1 ? "" : "s", 2 * over_by));
      std::fflush(stdout);
    }
  } catch (const std::exception& error) {
    std::fprintf(stderr, "error: %s\n", error.what());
    return 1;
  }
  return 0;
}
