// The whole-run bound (run_bound.hpp): the trace as one observation, packed by the engine's packer and search.
#include "run_bound.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "engine/heap.hpp"
#include "engine/plan_search.hpp"
#include "plimsoll/error.hpp"

namespace plimsoll::bench {

namespace {

struct NamedPacking {
  engine::PackOptions options;
  std::string name;
};

// The step bound's set (bench/step_plan_bound.cpp), granule-aware with nothing paid: every granule is new.
std::vector<NamedPacking> packings() {
  using engine::PackOrder;
  const auto order_name = [](PackOrder order) {
    return order == PackOrder::size ? "size" : order == PackOrder::lifetime ? "lifetime" : "size x lifetime";
  };
  std::vector<NamedPacking> all;
  for (const PackOrder order : {PackOrder::size, PackOrder::lifetime, PackOrder::area})
    for (const bool best_fit : {true, false})
      for (const bool slide_down : {false, true})
        all.push_back({{order, best_fit, slide_down},
                       fmt::format("{} by {}{}", best_fit ? "best fit" : "first fit", order_name(order),
                                   slide_down ? ", slid down" : "")});
  for (const PackOrder order : {PackOrder::size, PackOrder::area})
    all.push_back({{order, true, false, kRunGranule}, fmt::format("granule-aware by {}", order_name(order))});
  return all;
}

}  // namespace

std::size_t run_end(const Trace& trace, std::optional<std::size_t> through) {
  if (!through) return trace.events.size();
  if (*through >= trace.steps.size()) {
    throw InvalidArgument(fmt::format("{}: has {} steps (indices 0..{}), no step {}; pass a smaller --through-step, "
                                      "or leave it out to pack the whole trace",
                                      trace.origin, trace.steps.size(),
                                      trace.steps.empty() ? 0 : trace.steps.size() - 1, *through));
  }
  return trace.steps[*through].end;
}

engine::StepObservation observe_run(const Trace& trace, std::size_t end) {
  std::vector<std::uint64_t> size(trace.slots, 0);
  engine::StepObservation run;
  for (std::size_t i = 0; i < end && i < trace.events.size(); ++i) {
    const TraceEvent& e = trace.events[i];
    // Slots stand for addresses: the packer only needs them distinct (+1: no address 0).
    if (e.kind == TraceEvent::Kind::allocate) {
      size[e.slot] = engine::Heap::round(e.bytes);
      run.allocated(e.slot + 1ull, size[e.slot]);
    } else if (e.kind == TraceEvent::Kind::free) {
      run.freed(e.slot + 1ull, size[e.slot]);
    }
  }
  return run;
}

std::uint64_t covered_granules(const engine::StepPlan& plan, std::uint64_t base, std::uint64_t granule) {
  std::uint64_t count = 0, counted_end = 0;  // granules [.., counted_end) counted; ranges come sorted, merged
  for (const auto& [addr, size] : engine::covered_ranges(plan)) {
    const std::uint64_t first = std::max((addr - base) / granule, counted_end);
    const std::uint64_t last = (addr - base + size + granule - 1) / granule;
    if (last > first) count += last - first;
    counted_end = std::max(counted_end, last);
  }
  return count;
}

RunBound pack_run(const engine::StepObservation& run, const RunSearch& search, const RunProgress& progress) {
  const auto say = [&](const std::string& line) {
    if (progress) progress(line);
  };
  RunBound bound;
  bound.requests = run.requests.size();
  bound.max_load = engine::step_max_load(run);
  bound.max_load_granules = (bound.max_load + kRunGranule - 1) / kRunGranule;
  if (run.requests.empty()) return bound;
  // Room for any packing: one that put every request above the last never needs more than their sum.
  std::uint64_t sum = 0;
  for (const auto& request : run.requests) sum += request.size;
  constexpr std::uint64_t kBase = 1ull << 40;
  const std::uint64_t span = (sum / kRunGranule + 2) * kRunGranule;
  const std::vector<NamedPacking> all = packings();
  std::vector<std::pair<engine::StepPlan, std::uint64_t>> starts;  // greedy packings and their granules
  for (std::size_t k = 0; k < all.size(); ++k) {
    say(fmt::format("packing {} of {} ({}), {} requests", k + 1, all.size(), all[k].name, run.requests.size()));
    engine::StepPlan plan = engine::pack_step(run, {}, kBase, span, all[k].options);
    if (plan.entries.empty()) continue;
    const std::uint64_t granules = covered_granules(plan, kBase, kRunGranule);
    say(fmt::format("  {} granules, footprint {} bytes", granules, plan.footprint));
    if (search.all_starts) starts.emplace_back(plan, granules);
    if (bound.plan.entries.empty() || granules < bound.greedy_granules ||
        (granules == bound.greedy_granules && plan.footprint < bound.plan.footprint)) {
      bound.greedy_granules = granules;
      bound.greedy_name = all[k].name;
      bound.plan = std::move(plan);
    }
  }
  bound.granules = bound.greedy_granules;
  bound.footprint = bound.plan.footprint;
  if (search.work == 0 || bound.plan.entries.empty() || bound.granules <= bound.max_load_granules) return bound;
  const std::vector<bool> paid(span / kRunGranule, false);  // nothing is mapped before the run
  if (!search.all_starts) starts.emplace_back(bound.plan, bound.greedy_granules);
  const auto started = std::chrono::steady_clock::now();
  for (std::size_t from = 0; from < starts.size(); ++from) {
    for (std::uint64_t seed = 0; seed < search.seeds && bound.granules > bound.max_load_granules; ++seed) {
      say(fmt::format("search {} of {} from start {} of {} ({} granules), {} work units", seed + 1, search.seeds,
                      from + 1, starts.size(), starts[from].second, search.work));
      engine::StepPlan searched = engine::improve_plan(run, {}, kBase, span, starts[from].first,
                                                       {.budget = search.work,
                                                        .granule = kRunGranule,
                                                        .paid = &paid,
                                                        .seed = 0x5eed + seed,
                                                        .patience = search.patience});
      const std::uint64_t granules = covered_granules(searched, kBase, kRunGranule);
      say(fmt::format("  {} granules", granules));
      if (granules < bound.granules || (granules == bound.granules && searched.footprint < bound.footprint)) {
        bound.granules = granules;
        bound.footprint = searched.footprint;
        bound.plan = std::move(searched);
      }
    }
  }
  bound.search_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  return bound;
}

std::uint64_t limit_bytes(std::uint64_t peak_live, double over_live, double plus_mib) {
  if ((over_live > 0) == (plus_mib > 0)) {
    throw InvalidArgument("give exactly one limit: --limit-over-live X (a factor above 0) or --limit-plus-mib M "
                          "(MiB above 0)");
  }
  const double limit = over_live > 0 ? std::ceil(over_live * static_cast<double>(peak_live))
                                     : static_cast<double>(peak_live) + plus_mib * static_cast<double>(1ull << 20);
  if (!(limit < 18446744073709551616.0)) {
    throw InvalidArgument("the limit passes 2^64 bytes; give a smaller --limit-over-live or --limit-plus-mib");
  }
  return static_cast<std::uint64_t>(std::ceil(limit));
}

}  // namespace plimsoll::bench
