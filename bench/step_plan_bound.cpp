// plimsoll_step_plan_bound: the lower bound for step-aware placement on a trace. Packs one recorded step offline
// with the engine's own packer (src/engine/step_plan.hpp), with no obstacles and every address free, in every
// order and placement rule it has (and its slide-down pass, too dear to run at a boundary), keeps the smallest,
// improves it with the bounded search (src/engine/plan_search.hpp, --search-work units), and prints what the
// step's requests need (its footprint) against their own live peak and against the most bytes the packer must
// hold at once (its max load: no packing can do better), and what the whole device would need (memory the step
// does not free, packed below the step, + the footprint, rounded up to 2 MiB granules) against the trace's peak
// live bytes, as requested and rounded to the heap's 256 bytes (the least any packing of these rounded blocks
// can map).
//   plimsoll_step_plan_bound [--step N] [--search-work W] TRACE...   (N: index into the trace's steps, default 1)
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "engine/greedy_packings.hpp"
#include "engine/heap.hpp"
#include "engine/plan_search.hpp"
#include "engine/step_plan.hpp"
#include "plimsoll/trace.hpp"

namespace {

constexpr std::uint64_t kGranule = 2ull << 20;

struct Bound {
  std::uint64_t step_peak = 0;          // the step's own requests: their live peak
  std::uint64_t max_load = 0;           // with the previous copies of the leftovers: what any packing must hold
  std::uint64_t greedy_footprint = 0;   // the best greedy packing
  std::uint64_t footprint = 0;          // that packing after the search
  double search_ms = 0;                 // the search's time
  std::uint64_t kept = 0;               // live across the whole step (weights, optimizer state)
  std::uint64_t trace_peak = 0;         // of the whole trace, as requested
  std::uint64_t trace_rounded_peak = 0; // of the whole trace, each block rounded as the heap rounds it
};

// The trace's peak of live bytes with every block rounded as the heap rounds it (Heap::round).
std::uint64_t rounded_peak(const plimsoll::Trace& trace) {
  std::vector<std::uint64_t> size(trace.slots, 0);
  std::uint64_t live = 0, peak = 0;
  for (const plimsoll::TraceEvent& e : trace.events) {
    if (e.kind == plimsoll::TraceEvent::Kind::allocate) {
      size[e.slot] = plimsoll::engine::Heap::round(e.bytes);
      live += size[e.slot];
      peak = std::max(peak, live);
    } else if (e.kind == plimsoll::TraceEvent::Kind::free) {
      live -= size[e.slot];
    }
  }
  return peak;
}

Bound bound_of(const plimsoll::Trace& trace, std::size_t step_index, std::uint64_t search_work) {
  const plimsoll::TraceStep& step = trace.steps.at(step_index);
  // Sizes and liveness before the step, by slot.
  std::vector<std::uint64_t> size(trace.slots, 0);
  std::vector<bool> live(trace.slots, false);
  for (std::size_t i = 0; i < step.begin; ++i) {
    const plimsoll::TraceEvent& e = trace.events[i];
    if (e.kind == plimsoll::TraceEvent::Kind::allocate) {
      size[e.slot] = plimsoll::engine::Heap::round(e.bytes);
      live[e.slot] = true;
    } else if (e.kind == plimsoll::TraceEvent::Kind::free) {
      live[e.slot] = false;
    }
  }
  std::vector<bool> freed_in_step(trace.slots, false);
  plimsoll::engine::StepObservation observed;
  for (std::size_t i = step.begin; i < step.end; ++i) {
    const plimsoll::TraceEvent& e = trace.events[i];
    // Slots stand for addresses: the packer only needs them distinct (+1: no address 0).
    if (e.kind == plimsoll::TraceEvent::Kind::allocate) {
      size[e.slot] = plimsoll::engine::Heap::round(e.bytes);
      observed.allocated(e.slot + 1ull, size[e.slot]);
    } else if (e.kind == plimsoll::TraceEvent::Kind::free) {
      if (live[e.slot]) freed_in_step[e.slot] = true;
      observed.freed(e.slot + 1ull, size[e.slot]);
    }
  }
  observed.pair_leftovers();
  for (auto& request : observed.requests) request.pinned = 0;  // every address is free: nothing to pin to
  Bound bound;
  constexpr std::uint64_t kBase = 1ull << 40, kSpan = 1ull << 44;
  plimsoll::engine::StepPlan best;
  for (const plimsoll::engine::NamedPacking& packing : plimsoll::engine::greedy_packings(kGranule)) {
    const plimsoll::engine::PackOptions& options = packing.options;
    plimsoll::engine::StepPlan plan = plimsoll::engine::pack_step(observed, {}, kBase, kSpan, options);
    if (best.entries.empty() || plan.footprint < best.footprint) best = std::move(plan);
  }
  bound.step_peak = best.peak_live;
  bound.max_load = plimsoll::engine::step_max_load(observed);
  bound.greedy_footprint = best.footprint;
  const auto started = std::chrono::steady_clock::now();
  const plimsoll::engine::StepPlan searched =
      plimsoll::engine::improve_plan(observed, {}, kBase, kSpan, best, {.budget = search_work});
  bound.search_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  bound.footprint = searched.footprint;
  for (std::uint32_t slot = 0; slot < trace.slots; ++slot)
    if (live[slot] && !freed_in_step[slot]) bound.kept += size[slot];
  bound.trace_peak = trace.peak_live_bytes;
  bound.trace_rounded_peak = rounded_peak(trace);
  return bound;
}

std::uint64_t granules(std::uint64_t bytes) { return (bytes + kGranule - 1) / kGranule * kGranule; }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"The lower bound of step-aware placement: one recorded step packed offline"};
  std::vector<std::string> traces;
  std::size_t step_index = 1;
  std::uint64_t search_work = 200'000'000;
  app.add_option("traces", traces, "Trace files")->required();
  app.add_option("--step", step_index, "Which step to pack (index into the trace's steps)")->capture_default_str();
  app.add_option("--search-work", search_work, "The search's budget in work units (0: greedy packings alone)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    fmt::print("| trace | step | step's live peak | max load | greedy footprint | searched footprint | search ms | "
               "footprint/max load | kept across the step | bound (kept + footprint, in granules) | trace peak live "
               "| rounded to 256 B | bound/peak live | bound/rounded peak in granules |\n");
    fmt::print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (const std::string& path : traces) {
      const plimsoll::Trace trace = plimsoll::read_trace(path);
      if (trace.steps.size() <= step_index) {
        std::fprintf(stderr, "%s: has %zu steps, no step %zu; pass --step with a smaller index\n", path.c_str(),
                     trace.steps.size(), step_index);
        return 1;
      }
      const Bound b = bound_of(trace, step_index, search_work);
      // The kept blocks packed below the step's plan: one rounding to granules for both.
      const std::uint64_t total = granules(b.kept + b.footprint);
      const auto ratio = [](std::uint64_t over, std::uint64_t under) {
        return under == 0 ? 0.0 : static_cast<double>(over) / static_cast<double>(under);
      };
      const auto mib = [](std::uint64_t bytes) {
        return fmt::format("{:.2f} MiB", static_cast<double>(bytes) / static_cast<double>(1ull << 20));
      };
      fmt::print("| {} | {} | {} | {} | {} | {} | {:.0f} | {:.4f} | {} | {} | {} | {} | {:.4f} | {:.4f} |\n",
                 std::filesystem::path(trace.origin).filename().string(), step_index, mib(b.step_peak),
                 mib(b.max_load), mib(b.greedy_footprint), mib(b.footprint), b.search_ms,
                 ratio(b.footprint, b.max_load), mib(b.kept), mib(total), mib(b.trace_peak),
                 mib(b.trace_rounded_peak), ratio(total, b.trace_peak), ratio(total, granules(b.trace_rounded_peak)));
    }
  } catch (const std::exception& error) {
    std::fprintf(stderr, "error: %s\n", error.what());
    return 1;
  }
  return 0;
}
