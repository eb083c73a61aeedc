// The whole-run bound (run_bound.hpp): the trace as one observation, packed by the engine's packer and search.
#include "run_bound.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "backings/sim_backing.hpp"
#include "engine/heap.hpp"
#include "engine/plan_search.hpp"
#include "greedy_packings.hpp"
#include "plimsoll/error.hpp"

namespace plimsoll::bench {

std::optional<std::size_t> step_index(std::optional<std::int64_t> given) {
  if (!given) return std::nullopt;
  if (*given < 0) {
    throw InvalidArgument(fmt::format("--through-step {}: a step index is 0 or more (0: the first step); give one, "
                                      "or leave it out to pack the whole trace",
                                      *given));
  }
  return static_cast<std::size_t>(*given);
}

std::size_t run_end(const Trace& trace, std::optional<std::size_t> through) {
  if (!through) return trace.events.size();
  if (*through >= trace.steps.size()) {
    const std::size_t n = trace.steps.size();
    const std::string has = n == 0   ? std::string("has no step markers ('# step N begin' / '# step N end')")
                            : n == 1 ? std::string("has 1 step (index 0)")
                                     : fmt::format("has {} steps (indices 0..{})", n, n - 1);
    throw InvalidArgument(fmt::format("{}: {}, no step {}; {}", trace.origin, has, *through,
                                      n == 0 ? "leave out --through-step to pack the whole trace"
                                             : "pass a smaller --through-step, or leave it out to pack the whole "
                                               "trace"));
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
  constexpr std::uint64_t kBase = kRunBase;
  const std::uint64_t span = (sum / kRunGranule + 2) * kRunGranule;
  const std::vector<NamedPacking> all = greedy_packings(kRunGranule);
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

std::uint64_t run_limit(std::uint64_t peak_live, double over_live, double plus_mib) {
  if (over_live == 0 && plus_mib == 0) {  // the issue-16 target: 1.01 x peak live over 1 GiB live, + 4 MiB under
    const bool large = peak_live > (1ull << 30);
    return limit_bytes(peak_live, large ? 1.01 : 0, large ? 0 : 4);
  }
  return limit_bytes(peak_live, over_live, plus_mib);
}

std::vector<PreparedRun> prepare_runs(std::vector<Trace> traces, std::optional<std::int64_t> through, double over_live,
                                      double plus_mib) {
  const std::optional<std::size_t> step = step_index(through);
  std::vector<PreparedRun> runs;
  for (Trace& trace : traces) {
    PreparedRun run;
    run.end = run_end(trace, step);
    try {
      run.limit = run_limit(trace.peak_live_bytes, over_live, plus_mib);
    } catch (const InvalidArgument& error) {
      throw InvalidArgument(fmt::format("{}: {}", trace.origin, error.what()));
    }
    run.step0_end = trace.steps.empty() ? 0 : std::min(trace.steps[0].end, run.end);
    run.trace = std::move(trace);
    runs.push_back(std::move(run));
  }
  return runs;
}

std::uint32_t tick_at(const Trace& trace, std::size_t end) {
  std::uint32_t ticks = 0;
  for (std::size_t i = 0; i < end && i < trace.events.size(); ++i) {
    const TraceEvent::Kind kind = trace.events[i].kind;
    if (kind == TraceEvent::Kind::allocate || kind == TraceEvent::Kind::free) ++ticks;
  }
  return ticks;
}

MappedPeaks mapped_peaks(const engine::StepObservation& run, const engine::StepPlan& plan, std::uint64_t base,
                         std::uint64_t granule, std::uint32_t unmap_until) {
  MappedPeaks peaks;
  if (plan.entries.size() != run.requests.size()) return peaks;
  // One event per tick (StepObservation gives each allocation and free its own): births and deaths by tick.
  std::vector<std::int64_t> at_tick(run.ticks, 0);  // request index + 1, negated for a death; 0: no event
  std::uint64_t top = 0;
  for (std::size_t r = 0; r < run.requests.size(); ++r) {
    const auto& request = run.requests[r];
    if (plan.entries[r].addr == 0 || request.size == 0) continue;
    at_tick[request.born] = static_cast<std::int64_t>(r) + 1;
    if (request.died != engine::StepObservation::kOutlives) at_tick[request.died] = -static_cast<std::int64_t>(r) - 1;
    top = std::max(top, plan.entries[r].addr + plan.entries[r].size - base);
  }
  std::vector<std::uint32_t> users(top / granule + 1, 0);  // live entries covering each granule
  std::vector<bool> mapped(users.size(), false);            // kept mapped from unmap_until on
  std::uint64_t live = 0, kept = 0;
  for (std::uint32_t tick = 0; tick < run.ticks; ++tick) {
    if (tick == unmap_until) {  // unmapping stops: what live entries cover now stays mapped
      for (std::size_t g = 0; g < users.size(); ++g) mapped[g] = users[g] > 0;
      kept = live;
    }
    const std::int64_t event = at_tick[tick];
    if (event == 0) continue;  // a free of nothing planned
    const std::size_t r = static_cast<std::size_t>((event > 0 ? event : -event) - 1);
    const std::uint64_t first = (plan.entries[r].addr - base) / granule;
    const std::uint64_t last = (plan.entries[r].addr - base + plan.entries[r].size + granule - 1) / granule;
    for (std::uint64_t g = first; g < last; ++g) {
      if (event > 0) {
        if (users[g]++ == 0) ++live;
        if (tick >= unmap_until && !mapped[g]) {
          mapped[g] = true;
          ++kept;
        }
      } else if (--users[g] == 0) {
        --live;
      }
    }
    peaks.unmapping = std::max(peaks.unmapping, live);
    peaks.unmap_until = std::max(peaks.unmap_until, tick >= unmap_until ? kept : live);
  }
  return peaks;
}

Followed follow_on_heap(const Trace& trace, std::size_t end, const engine::StepPlan& plan, std::uint64_t limit,
                        bool unmap) {
  backings::SimBacking sim(std::max<std::uint64_t>(64ull << 30, limit));
  engine::HeapOptions options;
  options.limit = limit;
  engine::Heap heap(sim, options);
  Followed followed;
  std::vector<std::uint64_t> addr_of(trace.slots, 0);
  for (std::size_t i = 0; i < end && i < trace.events.size(); ++i) {
    const TraceEvent& e = trace.events[i];
    if (e.kind == TraceEvent::Kind::allocate) {
      if (followed.requests >= plan.entries.size()) break;
      const engine::StepPlan::Entry& entry = plan.entries[followed.requests++];
      addr_of[e.slot] = heap.allocate_at(heap.base() + (entry.addr - kRunBase), e.bytes, 1);
      if (addr_of[e.slot] != 0) ++followed.placed;
    } else if (e.kind == TraceEvent::Kind::free && addr_of[e.slot] != 0) {
      engine::Heap::Freed freed;
      (void)heap.deallocate(addr_of[e.slot], freed);
      addr_of[e.slot] = 0;
      if (unmap) (void)heap.release_cached();
    }
  }
  followed.peak_granules = heap.counters().peak_mapped / kRunGranule;
  followed.maps = heap.counters().maps;
  followed.unmaps = heap.counters().unmaps;
  followed.self_check = heap.self_check();
  return followed;
}

}  // namespace plimsoll::bench
