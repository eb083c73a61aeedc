#include "engine/plan_follower.hpp"

#include <algorithm>
#include <chrono>
#include <unordered_set>
#include <vector>

#include "engine/emptying_pages.hpp"
#include "engine/plan_candidates.hpp"
#include "engine/transition_plan.hpp"

namespace plimsoll::engine {
namespace {

// What the ideal plan of pack_transition is packed from, as one number (never 0): the step's requests with their
// lifetimes, the older blocks, and the heap's span, limit and granule.
std::uint64_t ideal_inputs(const StepObservation& step, const std::vector<Obstacle>& older, const HeapSnapshot& heap) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  const auto mix = [&h](std::uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h *= 0x100000001b3ull;
  };
  mix(heap.base);
  mix(heap.span);
  mix(heap.limit);
  mix(heap.granules.granule());
  mix(step.ticks);
  for (const StepObservation::Request& r : step.requests) {
    mix(r.size);
    mix((std::uint64_t{r.born} << 32) | r.died);
    mix(r.held_until);
    mix(r.pinned);
    mix(r.growth ? 1 : 0);
  }
  for (const Obstacle& o : older) {
    mix(o.addr);
    mix(o.size);
    mix(o.until);
  }
  return h == 0 ? 1 : h;
}

}  // namespace

void PackJob::pack() {
  if (void (*hook)() = while_packing.load()) hook();
  const auto start = std::chrono::steady_clock::now();
  plan = best_plan({as_obstacles, obstacles}, {pinned, around_pinned}, heap);
  if (!plan.entries.empty()) cost = plan_cost(plan, heap);
  // No steady plan fits: maybe one step of a transition plan, costed tick by tick, leads to one that does.
  if (!plan.entries.empty() && !cost.fits) {
    const std::uint64_t inputs = ideal_inputs(as_obstacles, older, heap);
    if (inputs != missed_ideal) {
      transition = pack_transition(as_obstacles, obstacles, older, heap);
      const bool missed = transition.ideal.entries.empty() ||
                          transition.ideal_granules * heap.granules.granule() > heap.limit;
      missed_ideal = missed ? inputs : 0;
    }
  }
  pack_ns = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
}

std::uint64_t PlanFollower::allocate(std::uint64_t bytes, std::uint16_t tag) {
  ++events_;
  if (heap_.paused()) [[unlikely]] return heap_.allocate(bytes, tag);  // refused (HeapFailure::paused), not a fallback
  if (plan_.entries.empty()) {
    const std::uint64_t addr = heap_.allocate(bytes, tag);
    if (observing_ && addr != 0) {
      ++stats_.learning;
      observe(addr, Heap::round(bytes));
    }
    return addr;
  }
  if (step_given_up_) {
    const std::uint64_t addr = heap_.allocate(bytes, tag);
    if (addr != 0) observe(addr, Heap::round(bytes));
    return addr;
  }
  const std::uint64_t size = Heap::round(bytes);
  const std::size_t end = std::min(plan_.entries.size(), cursor_ + kLookahead);
  if (cursor_ >= plan_.entries.size()) return fall_back(bytes, tag, &StepPlanStats::past_plan);
  std::size_t match = cursor_;
  while (match < end && plan_.entries[match].size != size) ++match;
  if (match == end) return fall_back(bytes, tag, &StepPlanStats::not_in_plan);
  stats_.skipped += match - cursor_;
  cursor_ = match + 1;
  if (plan_.entries[match].addr == 0) {  // growth: above the plan, where it never takes a planned range
    const std::uint64_t addr = place_above_plan(bytes, tag);
    if (addr != 0) {
      ++stats_.growth;
      observe(addr, size);
    }
    return addr;
  }
  std::uint64_t hint = 0;
  for (const std::uint32_t j : plan_.below[match]) {
    if (j == UINT32_MAX) break;
    if (heap_.find_live(plan_.entries[j].addr)) {
      hint = plan_.entries[j].addr;
      break;
    }
  }
  if (transition_) {
    if (const std::uint64_t addr = follow_transition(match, bytes, tag, hint); addr != 0) {
      ++stats_.followed;
      ++stats_.transition_followed;
      observe(addr, size);
      return addr;
    }
  } else if (const std::uint64_t addr = heap_.allocate_at(plan_.entries[match].addr, bytes, tag, hint); addr != 0) {
    ++stats_.followed;
    observe(addr, size);
    return addr;
  }
  // Out of host memory for the heap's books: best fit would need the same books (it declines too), and the range
  // was not over the limit. Declined at once, the reason kept for the caller.
  if (heap_.last_failure() == HeapFailure::host_memory) [[unlikely]] return 0;
  return fall_back(bytes, tag,
                   heap_.last_failure() == HeapFailure::occupied ? &StepPlanStats::occupied : &StepPlanStats::over_limit);
}

std::uint64_t PlanFollower::follow_transition(std::size_t match, std::uint64_t bytes, std::uint16_t tag,
                                             std::uint64_t hint) {
  const StepPlan::Entry& entry = plan_.entries[match];
  std::uint64_t addr = heap_.allocate_at(entry.addr, bytes, tag, hint);
  if (addr == 0 && heap_.last_failure() == HeapFailure::limit) {
    // Lazy mapping: room is made by giving back cached granules (left by the previous copies and the step before)
    // that no transition entry born so far covers, under the same limit as ever; the plan's own granules stay
    // mapped for the steps after. When that is not enough, best fit takes the request (fall_back).
    if (heap_.map_ranges({{entry.addr, entry.size}}, &transition_kept_))
      addr = heap_.allocate_at(entry.addr, bytes, tag, hint);
  }
  if (addr != 0) {
    const GranuleMap& map = heap_.granules();
    for (std::uint64_t g = map.first_covering(entry.addr); g < map.end_covering(entry.addr, entry.size); ++g)
      transition_kept_[g] = true;
  }
  return addr;
}

void PlanFollower::begin_transition(TransitionPlan transition) {
  // First what may throw (out of host memory): nothing is changed then, and best fit goes on.
  transition_kept_.assign(heap_.span_bytes() / heap_.granules().granule() + 1, false);
  transition_ = true;
  plan_ = std::move(transition.plan);
  ideal_ = std::move(transition.ideal);
  maps_before_transition_ = heap_.counters().maps;
  unmaps_before_transition_ = heap_.counters().unmaps;
  ++stats_.transitions;
}

void PlanFollower::stop_transition() {
  transition_ = false;
  stats_.transition_maps += heap_.counters().maps - maps_before_transition_;
  stats_.transition_unmaps += heap_.counters().unmaps - unmaps_before_transition_;
  transition_kept_ = {};
}

void PlanFollower::abandon_transition() {
  stop_transition();
  ++stats_.transitions_abandoned;
  // An unfit pack as far as packing again goes: a job whose transitions are always given up would otherwise pay a
  // whole pack (best plan, ideal plan and its search, transition) at every boundary forever.
  next_try_ = stats_.steps + unfit_backoff_.after_unfit(transition_unfit_granules_);
  plan_ = StepPlan{};
  ideal_ = StepPlan{};
}

void PlanFollower::end_transition() {
  stop_transition();
  plan_ = StepPlan{};
  StepPlan ideal = std::move(ideal_);
  ideal_ = StepPlan{};
  // Mapped whole now, and followed as any plan; when its ranges cannot be mapped (the transition step fell back
  // and left blocks elsewhere), it is unfit like any plan, and best fit goes on.
  PlanCost cost;
  cost.granules = UINT64_MAX;  // not costed: it counts as no better than any unfit plan for the back-off
  // The back-off starts afresh only once the ideal plan was followed a whole step without a fallback (begin_boundary).
  install(std::move(ideal), cost, /*reset_backoff=*/false);
  ideal_on_trial_ = !plan_.entries.empty();
}

std::uint64_t PlanFollower::place_above_plan(std::uint64_t bytes, std::uint16_t tag) {
  // Best fit among the free space above the plan's highest byte: growth packs together there, and the plan's
  // space below stays whole for the steps to come. Through the heap's free bins: the free blocks large enough,
  // not every block of the heap.
  const std::uint64_t size = Heap::round(bytes);
  const std::uint64_t top = heap_.base() + plan_.footprint;
  std::uint64_t best_addr = 0, best_room = UINT64_MAX;
  heap_.for_each_free_large(size, [&](const BlockView& block) {
    if (block.addr + block.size <= top) return;
    const std::uint64_t start = std::max(block.addr, top);
    const std::uint64_t room = block.addr + block.size - start;
    if (room >= size && (room < best_room || (room == best_room && start < best_addr))) {  // lowest on ties
      best_room = room;
      best_addr = start;
    }
  });
  if (best_addr != 0)
    if (const std::uint64_t addr = heap_.allocate_at(best_addr, bytes, tag); addr != 0) return addr;
  return heap_.allocate(bytes, tag);  // no room above, or not under the limit there: best fit, which may
}

std::uint64_t PlanFollower::fall_back(std::uint64_t bytes, std::uint16_t tag, std::uint64_t StepPlanStats::*reason) {
  ++(stats_.*reason);
  ++step_fallbacks_;
  // A transition step that does not go as planned is given up at once: its entries placed so far hold granules
  // best fit may need, and every later entry would meet the same surprise (measured: an extra 3 MiB tensor in
  // GPT's transition step at 617 granules ran it out of memory where best fit alone does not). The rest of the
  // step is best fit's, and the next boundary packs again.
  if (transition_) abandon_transition();
  // So is the step of a steady plan packed for pages that empty (emptying_pages.hpp) at a fallback that says its
  // premise is gone: any fallback while such a page is still live (a block best fit put there, a leftover the
  // pairing misjudged: every entry over that page meets the same), or a request it did not plan or a range over the
  // limit (the fallbacks would map granules the plan did not count). Measured on GPT with an extra 3 MiB tensor live
  // through step 2 (tests/cli_transition_test.cpp): without it, out of memory at 617 granules (event 2,877, after 48
  // fallbacks) and at 618 when given up only while a page is live (event 4,179), where best fit alone lasts; given
  // up at every fallback of any plan, ResNet-50 at 1.01 x ran out of memory (docs/engine.md, "Against the target").
  else if (!emptying_pages_.empty() &&
           (reason != &StepPlanStats::occupied ||
            std::any_of(emptying_pages_.begin(), emptying_pages_.end(),
                        [this](std::uint64_t page) { return page_still_live(page); }))) {
    step_given_up_ = true;
    ++stats_.steps_given_up;
  }
  const std::uint64_t addr = heap_.allocate(bytes, tag);
  if (addr != 0) observe(addr, Heap::round(bytes));
  return addr;
}

// A page that emptied went back to the large class, and a planned block may start where it began (GPT at 617
// granules: a 4 MiB entry, which read as the page still live and gave up every other step). Nor does a live small
// block at the page's address say the page is there: its first block may be freed while others on it stay live. The
// heap's page map does.
bool PlanFollower::page_still_live(std::uint64_t page) const { return heap_.small_page_at(page); }

// Runs inside the device's noexcept try_allocate, after the heap placed the block: out of host memory for the
// observation, the step goes unobserved instead.
void PlanFollower::observe(std::uint64_t addr, std::uint64_t size) noexcept {
  if (!observing_) return;
  if (observation_.requests.size() >= kMaxStepRequests) {  // not a training step: stop watching until the next
    stop_observing();
    return;
  }
  try {
    observation_.allocated(addr, size);
  } catch (const std::bad_alloc&) {
    stop_observing();
  }
}

void PlanFollower::step_boundary() {
  std::unique_ptr<PackJob> job = begin_boundary();
  if (job == nullptr) return;
  job->pack();
  finish_boundary(std::move(job));
}

std::unique_ptr<PackJob> PlanFollower::begin_boundary() {
  ++stats_.steps;
  step_given_up_ = false;
  if (ideal_on_trial_) {  // the ideal plan after a transition: a whole step without a fallback ends the back-off
    ideal_on_trial_ = false;
    if (step_fallbacks_ == 0 && !plan_.entries.empty()) unfit_backoff_.reset();
  }
  // Where the step just ended left its leftovers: the next step pairs its own with their frees by address
  // (StepObservation::pair_leftovers). Taken before prepare_pack moves the observation out; empty when unobserved.
  StepObservation::LeftoverPositions leftovers = observing_ ? observation_.leftover_positions()
                                                            : StepObservation::LeftoverPositions{};
  if (transition_) {  // the transition step is over: the ideal plan from the next step on, no pack
    first_plan_ = false;
    start_step(std::move(leftovers), false);
    // A step too long to be one (or unobserved for want of host memory) is not the step the transition planned.
    if (observing_) {
      end_transition();
    } else {
      abandon_transition();
      observing_ = true;
    }
    return nullptr;
  }
  if (!observing_) {  // the first boundary (what came before, model building, is not a step), or a step too long
    observing_ = true;
    observation_.clear();
    cursor_ = 0;
    return nullptr;
  }
  if (held_) {  // a run plan places this device's requests: the step is watched, nothing packed (hold_plans)
    start_step(std::move(leftovers), false);
    return nullptr;
  }
  const bool fell_back = step_fallbacks_ > 0;
  const bool pack =
      plan_.entries.empty() || (fell_back && (first_plan_ || previous_step_fell_back_));
  std::unique_ptr<PackJob> job;
  if (pack && !packing_ && !observation_.requests.empty() && stats_.steps >= next_try_) {
    first_plan_ = stats_.plans + stats_.unfit + stats_.transitions == 0;
    job = prepare_pack();
    packing_ = true;
  }
  start_step(std::move(leftovers), fell_back);
  return job;
}

void PlanFollower::start_step(StepObservation::LeftoverPositions leftovers, bool previous_fell_back) {
  previous_step_fell_back_ = previous_fell_back;
  step_fallbacks_ = 0;
  cursor_ = 0;
  observation_.clear();
  observation_.previous_leftovers = std::move(leftovers);
}

void PlanFollower::finish_boundary(std::unique_ptr<PackJob> job) {
  packing_ = false;
  missed_ideal_ = job->missed_ideal;  // true of its inputs even when the job is stale
  ++stats_.packs;
  stats_.pack_ns += job->pack_ns;
  // Anything allocated or freed since the copy may lie in the plan's ranges, and the step it belongs to has begun
  // without the plan: installing it now would start its cursor mid-step. Best fit goes on; the next boundary
  // packs again (no plan, or a step that falls back).
  if (job->events != events_ || heap_.paused()) {
    ++stats_.stale;
    // A job whose other threads allocate at every boundary would otherwise pay a whole pack per step for plans it
    // never follows: after stale packs, try again after 1, 3, 7, ... boundaries along the run of stale packs in a
    // row (not the job's whole history, as after unfit ones).
    ++stale_run_;
    next_try_ = stats_.steps + (std::uint64_t{1} << std::min<std::uint64_t>(stale_run_, 10)) - 1;
    return;
  }
  stale_run_ = 0;
  if (job->plan.entries.empty()) return;  // does not fit the address space: keep what there was
  emptying_pages_ = std::move(job->emptying);
  if (!job->cost.fits && job->transition.fits) {
    transition_unfit_granules_ = job->cost.granules;
    begin_transition(std::move(job->transition));
    return;
  }
  install(std::move(job->plan), job->cost);
}

std::unique_ptr<PackJob> PlanFollower::prepare_pack() {
  // Memory that was live before the observed step began and still is stays where it is, for the whole step.
  std::vector<Obstacle> obstacles;
  std::unordered_set<std::uint64_t> in_pages;  // leftovers inside small pages: the plan cannot reuse their place
  heap_.walk([&](const BlockView& block) {
    if (block.free) return;
    if (block.small) {
      in_pages.insert(block.addr);
      return;
    }
    if (!block.page && observation_.live.count(block.addr) != 0) return;
    obstacles.push_back(Obstacle{block.addr, block.size});
  });
  // Growth: what the step keeps without freeing an older copy of it (a job that keeps every batch). Placed at
  // planned addresses, each step's copy would stay live inside the plan's space and scatter the next plans
  // around it; left out of the plan, it goes above the plan (place_above_plan). A step counts as growing when it
  // leaves more bytes live than it freed of older blocks: a step after a change of shapes leaves unpaired
  // leftovers too, but frees the old shapes' copies, and its leftovers are gradients to plan like any. The first
  // observed step is not judged: its leftovers (gradients, optimizer state) have no older copies yet either.
  if (!first_plan_) {
    std::uint64_t kept = 0, freed_older = 0;
    for (const auto& [addr, index] : observation_.live) kept += observation_.requests[index].size;
    for (const StepObservation::OlderFree& f : observation_.older_frees) freed_older += f.size;
    if (kept > freed_older) {
      // Paired by order, as before pairing by identity: on the batch-keeping ResNet-18 trace at +4 MiB, identity
      // pairing of its growing steps ran the plan out of memory at event 54,054 instead of 81,031. Not the rule
      // itself: identity calls the step's growth closer to its true bytes, and over limits of +2..+16 MiB neither
      // rule lasts longer systematically (where the kept batches land inside a plan whose top reaches the limit
      // decides; both run out before best fit alone does): docs/engine.md, "Growing steps: identity against order".
      observation_.previous_leftovers.clear();
      StepObservation paired = observation_;
      paired.pair_leftovers();
      for (std::size_t i = 0; i < paired.requests.size(); ++i) {
        const StepObservation::Request& request = paired.requests[i];
        if (request.died == StepObservation::kOutlives && request.held_until == paired.ticks)
          observation_.requests[i].growth = true;
      }
    }
  }
  // Two ways to carry the step's leftovers into the plan (plan_candidates.hpp tries both). Pinned: each stays
  // where it is, and its next copy shares its range (StepObservation::pair_leftovers); those in small pages are
  // packed like any request instead, their page being an obstacle.
  auto job = std::make_unique<PackJob>();
  job->follower = serial_;
  job->events = events_;
  job->heap = HeapSnapshot::of(heap_);
  job->missed_ideal = missed_ideal_;
  StepObservation& pinned = job->pinned;
  pinned = observation_;
  pinned.pair_leftovers();
  // A page holding nothing but paired leftovers is empty once the next step has freed them: an obstacle until
  // then, and none in steady state (emptying_pages.hpp). Not for a growing step, whose pairing by size is a guess
  // among kept blocks: the batch-keeping ResNet-18 trace's plans, packed so, fell back more (6/11 maps/unmaps after
  // its first step against 5/6).
  const bool grows = std::any_of(observation_.requests.begin(), observation_.requests.end(),
                                 [](const StepObservation::Request& request) { return request.growth; });
  const EmptyingPages emptying =
      grows || !options_.reuse_emptying_pages ? EmptyingPages{} : emptying_pages(heap_, pinned);
  for (Obstacle& o : obstacles)
    if (const auto page = emptying.until.find(o.addr); page != emptying.until.end()) o.until = page->second;
  for (const auto& [page, until] : emptying.until) job->emptying.push_back(page);
  std::vector<Obstacle>& around_pinned = job->around_pinned;
  around_pinned = obstacles;
  for (StepObservation::Request& request : pinned.requests) {
    if (request.growth) {  // not pinned: it stays where it is, and the plan around it
      if (in_pages.count(request.pinned) == 0) around_pinned.push_back(Obstacle{request.pinned, request.size});
      request.pinned = 0;
      request.held_until = 0;
      continue;
    }
    if (request.pinned != 0 && in_pages.count(request.pinned) != 0) {
      // Packed like any request, its page an obstacle; in an emptying page, with its pair's tick kept: the next
      // copy, where the plan puts it, is live from the next step's start until then.
      if (emptying.leftovers.count(request.pinned) == 0) request.held_until = 0;
      request.pinned = 0;
    }
  }
  // What stays where it is in steady state: the ideal plan's obstacles (pack_transition). An emptying page is gone.
  job->older.clear();
  for (const Obstacle& o : around_pinned)
    if (emptying.until.count(o.addr) == 0) job->older.push_back(o);
  // As obstacles: each stays where it is until its pair's free (StepObservation::leftovers_as_obstacles); those in
  // small pages are covered by their page.
  for (const Obstacle& o : observation_.leftovers_as_obstacles())
    if (in_pages.count(o.addr) == 0) obstacles.push_back(o);
  job->as_obstacles = std::move(observation_);
  job->obstacles = std::move(obstacles);
  return job;
}

void PlanFollower::install(StepPlan plan, const PlanCost& cost, bool reset_backoff) {
  // Mapped once, here. A plan whose ranges cannot all be mapped under the limit is not followed: half a plan
  // scatters planned blocks through the space best fit needs for the rest (measured: following every entry that
  // fits ran GPT and ResNet-50 out of memory at 1.01 x, at events 1,576 and 41,976; following only its leftovers
  // where already mapped made ResNet-50 converge at 1.01 x but ran VGG-16 out of memory at 1.005 x and ResNet-50 at
  // 1.009 x, where best fit alone does not: docs/engine.md, "Against the target"). The next steps run best fit, are
  // observed, and are packed again: for a step that does not grow, at every boundary while the packs get cheaper
  // and less often once they do not (UnfitBackoff); for one that grows, after 1, 3, 7, ... boundaries along the
  // recent run of unfit plans (UnfitBackoff::after_unfit_growing).
  if (!heap_.map_ranges(covered_ranges(plan))) {
    ++stats_.unfit;
    plan_ = StepPlan{};
    const bool grows = std::any_of(plan.entries.begin(), plan.entries.end(),
                                   [](const StepPlan::Entry& entry) { return entry.addr == 0; });
    next_try_ = stats_.steps + (grows ? unfit_backoff_.after_unfit_growing(cost.granules)
                                      : unfit_backoff_.after_unfit(cost.granules));
    return;
  }
  plan_ = std::move(plan);
  ++stats_.plans;
  if (reset_backoff) unfit_backoff_.reset();
  stats_.plan_bytes = plan_.footprint == 0 ? 0 : [&] {
    std::uint64_t lo = UINT64_MAX;
    for (const StepPlan::Entry& e : plan_.entries)
      if (e.addr != 0) lo = std::min(lo, e.addr);
    return heap_.base() + plan_.footprint - lo;
  }();
  stats_.plan_peak_bytes = plan_.peak_live;
}

}  // namespace plimsoll::engine
