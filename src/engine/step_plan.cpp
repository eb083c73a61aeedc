#include "engine/step_plan.hpp"

#include "engine/step_packing.hpp"

#include <algorithm>
#include <numeric>

namespace plimsoll::engine {

void StepObservation::allocated(std::uint64_t addr, std::uint64_t size) {
  live[addr] = static_cast<std::uint32_t>(requests.size());
  requests.push_back(Request{size, ticks++, kOutlives});
}

void StepObservation::freed(std::uint64_t addr, std::uint64_t size) {
  const auto found = live.find(addr);
  if (found == live.end()) {
    older_frees.push_back(OlderFree{size, ticks++, addr});
    return;
  }
  requests[found->second].died = ticks++;
  live.erase(found);
}

namespace {
// Each request's position among the step's allocations of its size.
std::vector<std::uint32_t> positions_by_size(const std::vector<StepObservation::Request>& requests) {
  std::unordered_map<std::uint64_t, std::uint32_t> seen;
  std::vector<std::uint32_t> positions;
  positions.reserve(requests.size());
  for (const StepObservation::Request& request : requests) positions.push_back(seen[request.size]++);
  return positions;
}
}  // namespace

StepObservation::LeftoverPositions StepObservation::leftover_positions() const {
  LeftoverPositions positions;
  if (live.empty()) return positions;
  const std::vector<std::uint32_t> position = positions_by_size(requests);
  for (const auto& [addr, index] : live) {
    std::vector<std::uint64_t>& of_size = positions[requests[index].size];
    if (of_size.size() <= position[index]) of_size.resize(position[index] + 1, 0);
    of_size[position[index]] = addr;
  }
  return positions;
}

void StepObservation::pair_leftovers() {
  std::vector<std::pair<std::uint32_t, std::uint64_t>> leftovers;  // (request, address), in allocation order
  for (const auto& [addr, index] : live) leftovers.emplace_back(index, addr);
  std::sort(leftovers.begin(), leftovers.end());
  // Each leftover's previous copy: the block that was the step before's request at its position among its size.
  std::vector<std::uint64_t> copies;
  if (!previous_leftovers.empty()) {
    const std::vector<std::uint32_t> position = positions_by_size(requests);
    copies.reserve(leftovers.size());
    for (const auto& [index, addr] : leftovers) {
      const auto of_size = previous_leftovers.find(requests[index].size);
      const std::uint64_t copy = of_size == previous_leftovers.end() || position[index] >= of_size->second.size()
                                     ? 0
                                     : of_size->second[position[index]];
      if (copy == 0) {  // unknown: the step is not the one before repeated (a change of shapes)
        copies.clear();
        break;
      }
      copies.push_back(copy);
    }
  }
  if (!copies.empty()) {  // by identity: the free of that address
    std::unordered_map<std::uint64_t, std::uint32_t> freed_at;  // older block's address -> its free's tick
    for (const OlderFree& f : older_frees) freed_at.emplace(f.addr, f.tick);
    for (std::size_t k = 0; k < leftovers.size(); ++k) {
      Request& request = requests[leftovers[k].first];
      request.pinned = leftovers[k].second;
      request.held_until = ticks;  // unpaired unless its copy is freed in the step
      request.paired_by = Pairing::identity;
      const auto found = freed_at.find(copies[k]);
      // The previous copy must be gone before this one is born, or they cannot share a range.
      if (found != freed_at.end() && found->second <= request.born) request.held_until = found->second;
    }
    return;
  }
  // By order: leftovers in allocation order take the frees of older blocks of their size in free order.
  std::unordered_map<std::uint64_t, std::vector<std::uint32_t>> frees_by_size;  // ticks, latest first
  for (auto it = older_frees.rbegin(); it != older_frees.rend(); ++it) frees_by_size[it->size].push_back(it->tick);
  for (const auto& [index, addr] : leftovers) {
    Request& request = requests[index];
    request.pinned = addr;
    request.held_until = ticks;
    request.paired_by = Pairing::none;
    auto found = frees_by_size.find(request.size);
    if (found == frees_by_size.end() || found->second.empty()) continue;
    const std::uint32_t tick = found->second.back();
    found->second.pop_back();
    request.paired_by = Pairing::order;
    if (tick <= request.born) request.held_until = tick;
  }
}

std::vector<Obstacle> StepObservation::leftovers_as_obstacles() {
  pair_leftovers();
  std::vector<Obstacle> obstacles;
  for (Request& request : requests) {
    if (request.pinned == 0) continue;
    const bool paired = request.held_until < ticks;
    obstacles.push_back(Obstacle{request.pinned, request.size, paired ? request.held_until : UINT32_MAX});
    request.pinned = 0;
    if (!paired) request.held_until = 0;
  }
  return obstacles;
}

void StepObservation::clear() {
  requests.clear();
  older_frees.clear();
  live.clear();
  previous_leftovers.clear();
  ticks = 0;
}

namespace packing {

bool lifetimes_overlap(const StepObservation::Request& a, std::uint32_t a_died, const StepObservation::Request& b,
                       std::uint32_t b_died) {
  const auto meets = [](std::uint32_t lo1, std::uint32_t hi1, std::uint32_t lo2, std::uint32_t hi2) {
    return lo1 < hi2 && lo2 < hi1;
  };
  if (meets(a.born, a_died, b.born, b_died)) return true;
  const std::uint32_t a_held = a.died == StepObservation::kOutlives ? a.held_until : 0;
  const std::uint32_t b_held = b.died == StepObservation::kOutlives ? b.held_until : 0;
  return meets(0, a_held, b.born, b_died) || meets(a.born, a_died, 0, b_held) || (a_held > 0 && b_held > 0);
}

Packing::Packing(const StepObservation& observed, const std::vector<Obstacle>& obstacles) : step(observed) {
  fixed.reserve(obstacles.size());
  for (const Obstacle& o : obstacles) {
    if (o.until >= step.ticks) fixed.push_back({o.addr, o.addr + o.size});
    else if (o.until > 0) early.push_back(&o);
  }
}
std::uint64_t Packing::place(std::uint64_t size, std::uint64_t base, bool best_fit) const {
  std::uint64_t best_addr = 0, best_gap = UINT64_MAX;
  std::uint64_t cursor = base;
  for (const Interval& t : taken) {
    if (t.end <= cursor) continue;
    if (t.addr > cursor) {
      const std::uint64_t gap = t.addr - cursor;
      if (gap >= size && gap < best_gap) {
        if (!best_fit) return cursor;
        best_gap = gap;
        best_addr = cursor;
      }
    }
    cursor = std::max(cursor, t.end);
  }
  return best_gap == UINT64_MAX ? cursor : best_addr;
}

std::uint64_t Packing::place_in_granules(std::uint64_t size, std::uint64_t base, std::uint64_t granule,
                                         const std::vector<char>& used) const {
  const auto new_granules = [&](std::uint64_t addr) {
    std::uint64_t count = 0;
    for (std::uint64_t g = (addr - base) / granule; g < (addr + size - base + granule - 1) / granule; ++g)
      if (g >= used.size() || used[g] == 0) ++count;
    return count;
  };
  std::uint64_t best_addr = 0, best_cost = UINT64_MAX, best_gap = UINT64_MAX;
  const auto consider = [&](std::uint64_t addr, std::uint64_t gap) {
    const std::uint64_t added = new_granules(addr);
    if (added < best_cost || (added == best_cost && gap < best_gap)) {
      best_addr = addr;
      best_cost = added;
      best_gap = gap;
    }
  };
  std::uint64_t cursor = base;
  for (const Interval& t : taken) {
    if (t.end <= cursor) continue;
    if (t.addr > cursor && t.addr - cursor >= size) {
      consider(cursor, t.addr - cursor);
      consider(t.addr - size, t.addr - cursor);
    }
    cursor = std::max(cursor, t.end);
  }
  consider(cursor, UINT64_MAX);
  // The open space: also from the next granule boundary, when that costs fewer new granules.
  const std::uint64_t aligned = base + (cursor - base + granule - 1) / granule * granule;
  if (aligned != cursor) consider(aligned, UINT64_MAX);
  return best_addr;
}

void finish_plan(const StepObservation& step, std::uint64_t base, StepPlan& plan) {
  const std::size_t n = plan.entries.size();
  plan.footprint = 0;
  for (const StepPlan::Entry& e : plan.entries)
    if (e.addr != 0) plan.footprint = std::max(plan.footprint, e.addr + e.size - base);

  // Nearest entries below each one, for the follower's search hints.
  std::vector<std::uint32_t> by_addr(n);
  std::iota(by_addr.begin(), by_addr.end(), 0u);
  std::sort(by_addr.begin(), by_addr.end(),
            [&](std::uint32_t a, std::uint32_t b) { return plan.entries[a].addr < plan.entries[b].addr; });
  plan.below.assign(n, {});
  for (auto& slots : plan.below) slots.fill(UINT32_MAX);
  for (std::size_t k = 0; k < n; ++k) {
    const std::uint32_t i = by_addr[k];
    if (plan.entries[i].addr == 0) continue;
    std::size_t found = 0;
    for (std::size_t back = k; back > 0 && found < StepPlan::kNeighbours; --back) {
      const std::uint32_t j = by_addr[back - 1];
      if (plan.entries[j].addr == 0) break;  // growth entries sort first: none below this one is planned
      if (plan.entries[j].addr + plan.entries[j].size <= plan.entries[i].addr) plan.below[i][found++] = j;
    }
  }

  // The step's own peak: births add, deaths take away, in tick order.
  std::vector<std::pair<std::uint32_t, std::int64_t>> changes;
  changes.reserve(2 * n);
  for (std::size_t i = 0; i < n; ++i) {
    changes.emplace_back(step.requests[i].born, static_cast<std::int64_t>(step.requests[i].size));
    if (step.requests[i].died != StepObservation::kOutlives)
      changes.emplace_back(step.requests[i].died, -static_cast<std::int64_t>(step.requests[i].size));
  }
  std::sort(changes.begin(), changes.end());
  std::int64_t live = 0;
  plan.peak_live = 0;
  for (const auto& [tick, delta] : changes) {
    live += delta;
    plan.peak_live = std::max(plan.peak_live, static_cast<std::uint64_t>(live));
  }
}
}  // namespace packing

StepPlan pack_step(const StepObservation& step, std::vector<Obstacle> obstacles, std::uint64_t base,
                   std::uint64_t span, PackOptions options) {
  const std::size_t n = step.requests.size();
  using packing::Packing;
  Packing packing(step, obstacles);
  const auto died = [&](std::size_t i) { return packing.died(i); };
  const auto lifetime = [&](std::uint32_t i) { return std::uint64_t{died(i) - step.requests[i].born}; };
  const auto key = [&](std::uint32_t i) -> std::uint64_t {
    switch (options.order) {
      case PackOrder::size: return step.requests[i].size;
      case PackOrder::lifetime: return lifetime(i);
      case PackOrder::area: return (step.requests[i].size >> 8) * lifetime(i);
    }
    return 0;
  };
  std::vector<std::uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
    const auto& ra = step.requests[a];
    const auto& rb = step.requests[b];
    if ((ra.pinned != 0) != (rb.pinned != 0)) return ra.pinned != 0;  // pinned first: they are where they are
    if (key(a) != key(b)) return key(a) > key(b);
    if (ra.size != rb.size) return ra.size > rb.size;
    if (lifetime(a) != lifetime(b)) return lifetime(a) > lifetime(b);
    return a < b;
  });


  StepPlan plan;
  plan.entries.resize(n);
  std::vector<std::uint32_t> placed;  // indices into step.requests, placed so far
  placed.reserve(n);
  const std::uint64_t limit = base + span;
  // Granule-aware packing: which granules are paid for already (options.paid), and those the entries cover.
  std::vector<char> used;
  if (options.granule != 0) {
    used.resize(span / options.granule + 1, 0);
    if (options.paid != nullptr)
      for (std::size_t g = 0; g < options.paid->size() && g < used.size(); ++g) used[g] = (*options.paid)[g] ? 1 : 0;
  }
  for (const std::uint32_t i : order) {
    const auto& request = step.requests[i];
    if (request.growth) {  // placed by best fit at run time: it never meets a planned entry
      plan.entries[i] = StepPlan::Entry{request.size, 0};
      continue;
    }
    if (request.pinned != 0) {
      plan.entries[i] = StepPlan::Entry{request.size, request.pinned};
      placed.push_back(i);
      continue;
    }
    packing.collect(i, plan, placed);
    const std::uint64_t addr = options.granule != 0 ? packing.place_in_granules(request.size, base, options.granule, used)
                                                    : packing.place(request.size, base, options.best_fit);
    if (addr + request.size > limit) return StepPlan{};
    if (options.granule != 0) {
      const std::uint64_t end = std::min<std::uint64_t>((addr + request.size - base + options.granule - 1) / options.granule, used.size());
      for (std::uint64_t g = (addr - base) / options.granule; g < end; ++g) used[g] = 1;
    }
    plan.entries[i] = StepPlan::Entry{request.size, addr};
    placed.push_back(i);
  }
  // Second pass: from the lowest entry up, each unpinned entry slides down to the lowest place that is free of
  // everything else; no entry ever moves up, so the plan only gets smaller.
  if (options.slide_down && options.granule == 0) {
    std::vector<std::uint32_t> by_addr(placed);
    std::sort(by_addr.begin(), by_addr.end(), [&](std::uint32_t a, std::uint32_t b) {
      return plan.entries[a].addr < plan.entries[b].addr;
    });
    for (const std::uint32_t i : by_addr) {
      if (step.requests[i].pinned != 0) continue;
      packing.collect(i, plan, placed);
      const std::uint64_t addr = packing.place(step.requests[i].size, base, false);
      if (addr < plan.entries[i].addr) plan.entries[i].addr = addr;
    }
  }
  packing::finish_plan(step, base, plan);
  return plan;
}


std::vector<std::pair<std::uint64_t, std::uint64_t>> covered_ranges(const StepPlan& plan) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;  // (addr, end) while merging
  ranges.reserve(plan.entries.size());
  for (const StepPlan::Entry& e : plan.entries)
    if (e.addr != 0) ranges.emplace_back(e.addr, e.addr + e.size);
  std::sort(ranges.begin(), ranges.end());
  std::vector<std::pair<std::uint64_t, std::uint64_t>> merged;
  for (const auto& [addr, end] : ranges) {
    if (!merged.empty() && addr <= merged.back().second) merged.back().second = std::max(merged.back().second, end);
    else merged.emplace_back(addr, end);
  }
  for (auto& [addr, end] : merged) end -= addr;  // to (addr, size)
  return merged;
}

}  // namespace plimsoll::engine
