// The whole-run packing (run_packing.hpp): the trace as one observation, packed by the engine's packer and search.
#include "engine/run_packing.hpp"

#include <algorithm>
#include <chrono>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "engine/greedy_packings.hpp"
#include "engine/heap.hpp"
#include "engine/plan_search.hpp"
#include "plimsoll/error.hpp"

namespace plimsoll::engine {

StepObservation observe_run(const Trace& trace, std::size_t end) {
  std::vector<std::uint64_t> size(trace.slots, 0);
  StepObservation run;
  for (std::size_t i = 0; i < end && i < trace.events.size(); ++i) {
    const TraceEvent& e = trace.events[i];
    // Slots stand for addresses: the packer only needs them distinct (+1: no address 0).
    if (e.kind == TraceEvent::Kind::allocate) {
      size[e.slot] = Heap::round(e.bytes);
      run.allocated(e.slot + 1ull, size[e.slot]);
    } else if (e.kind == TraceEvent::Kind::free) {
      run.freed(e.slot + 1ull, size[e.slot]);
    }
  }
  return run;
}

std::uint64_t covered_granules(const StepPlan& plan, std::uint64_t base, std::uint64_t granule) {
  std::vector<RunPlan::Entry> entries;  // as offsets from base, the planned ones: one count for plans and run plans
  entries.reserve(plan.entries.size());
  for (const StepPlan::Entry& e : plan.entries)
    if (e.addr != 0 && e.size != 0) entries.push_back({e.size, e.addr - base});
  return count_covered_granules(entries, granule);
}

RunPacking pack_run(const StepObservation& run, const RunSearch& search, const RunProgress& progress) {
  const auto say = [&](const std::string& line) {
    if (progress) progress(line);
  };
  RunPacking bound;
  bound.requests = run.requests.size();
  bound.max_load = step_max_load(run);
  bound.max_load_granules = (bound.max_load + kRunGranule - 1) / kRunGranule;
  if (run.requests.empty()) return bound;
  // Room for any packing: one that put every request above the last never needs more than their sum.
  std::uint64_t sum = 0;
  for (const auto& request : run.requests) sum += request.size;
  constexpr std::uint64_t kBase = kRunBase;
  const std::uint64_t span = (sum / kRunGranule + 2) * kRunGranule;
  const std::vector<NamedPacking> all = greedy_packings(kRunGranule);
  std::vector<std::pair<StepPlan, std::uint64_t>> starts;  // greedy packings and their granules
  for (std::size_t k = 0; k < all.size(); ++k) {
    say(fmt::format("packing {} of {} ({}), {} requests", k + 1, all.size(), all[k].name, run.requests.size()));
    const auto packing_started = std::chrono::steady_clock::now();
    StepPlan plan = pack_step(run, {}, kBase, span, all[k].options);
    if (plan.entries.empty()) continue;
    const std::uint64_t granules = covered_granules(plan, kBase, kRunGranule);
    say(fmt::format("  {} granules, footprint {} bytes, {:.1f} s", granules, plan.footprint,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - packing_started).count()));
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
      StepPlan searched = improve_plan(run, {}, kBase, span, starts[from].first,
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

MappedPeaks mapped_peaks(const StepObservation& run, const StepPlan& plan, std::uint64_t base, std::uint64_t granule,
                         std::uint32_t unmap_until) {
  MappedPeaks peaks;
  if (plan.entries.size() != run.requests.size()) return peaks;
  // One event per tick (StepObservation gives each allocation and free its own): births and deaths by tick.
  std::vector<std::int64_t> at_tick(run.ticks, 0);  // request index + 1, negated for a death; 0: no event
  std::uint64_t top = 0;
  for (std::size_t r = 0; r < run.requests.size(); ++r) {
    const auto& request = run.requests[r];
    if (plan.entries[r].addr == 0 || request.size == 0) continue;
    at_tick[request.born] = static_cast<std::int64_t>(r) + 1;
    if (request.died != StepObservation::kOutlives) at_tick[request.died] = -static_cast<std::int64_t>(r) - 1;
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

RunPlan make_run_plan(const RunPacking& packing, const RunPlanSource& source) {
  RunPlan plan;
  plan.granule = kRunGranule;
  plan.limit = source.limit;
  plan.through_step = source.through_step;
  plan.source = source.source;
  plan.entries.reserve(packing.plan.entries.size());
  for (std::size_t i = 0; i < packing.plan.entries.size(); ++i) {
    const StepPlan::Entry& entry = packing.plan.entries[i];
    if (entry.addr < kRunBase) {
      throw InvalidState(fmt::format("request {} of the packing of {} has no planned address; a run plan places "
                                     "every request (pack it with pack_run)",
                                     i, source.source));
    }
    plan.entries.push_back({entry.size, entry.addr - kRunBase});
  }
  for (std::size_t i = 0; i < plan.entries.size() && i < RunPlan::kFingerprint; ++i) {
    plan.fingerprint.push_back(plan.entries[i].size);
  }
  plan.covered_granules = count_covered_granules(plan.entries, plan.granule);
  return plan;
}

PackedRunPlan pack_run_plan(const Trace& trace, const RunPlanRequest& request, const RunProgress& progress) {
  const std::optional<std::size_t> through = step_index(request.through_step);
  PackedRunPlan packed;
  packed.events = run_end(trace, through);
  packed.peak_live = trace.peak_live_bytes;
  std::uint64_t limit = 0;
  try {
    limit = run_limit(trace.peak_live_bytes, request.over_live, request.plus_mib);
  } catch (const InvalidArgument& error) {
    throw InvalidArgument(fmt::format("{}: {}", trace.origin, error.what()));
  }
  packed.limit_granules = limit / kRunGranule;
  const std::string force_fix = "or pass --force to write the plan anyway (a follower at this limit cannot keep to it)";
  const StepObservation run = observe_run(trace, packed.events);
  const std::uint64_t max_load = step_max_load(run);
  const std::uint64_t least = (max_load + kRunGranule - 1) / kRunGranule;
  if (least > packed.limit_granules && !request.force) {
    throw InvalidArgument(fmt::format(
        "{}: the limit ({} bytes, {} granules of 2 MiB) is below what is live at once ({} bytes, {} granules): no "
        "plan can fit it; give a higher limit (--limit-over-live, --limit-plus-mib), {}",
        trace.origin, limit, packed.limit_granules, max_load, least, force_fix));
  }
  const auto started = std::chrono::steady_clock::now();
  packed.packing = pack_run(run, request.search, progress);
  packed.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  packed.fits = packed.packing.granules <= packed.limit_granules;
  if (!packed.fits && !request.force) {
    throw InvalidArgument(fmt::format(
        "{}: the best packing found needs {} granules of 2 MiB where the limit ({} bytes) holds {} (the lower bound "
        "is {}); no plan written; search harder (--search-work, --search-seeds, --search-all-starts), give a higher "
        "limit, {}",
        trace.origin, packed.packing.granules, limit, packed.limit_granules, packed.packing.max_load_granules,
        force_fix));
  }
  const std::size_t last_step = through ? *through : (trace.steps.empty() ? 0 : trace.steps.size() - 1);
  packed.plan = make_run_plan(packed.packing, {.limit = limit, .through_step = last_step, .source = trace.origin});
  return packed;
}

}  // namespace plimsoll::engine
