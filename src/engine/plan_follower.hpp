#pragma once
// Step-aware placement, part 2: following a plan (src/engine/step_plan.hpp), and falling back to best fit.
//
// Between two step boundaries the follower watches the step (StepObservation). At a boundary it packs the observed
// step into a plan around what stays live (memory older than the step for the whole step, but a small page that holds
// only paired leftovers until they are freed: emptying_pages.hpp; the step's leftovers until the tick their previous
// copies were freed in it, or the whole step when that is unknown, or pinned where they are), keeping the cheapest of
// a few packings in granules mapped (plan_candidates.hpp), maps the plan's ranges once (they then stay mapped:
// planned memory is reused step after step with no map or unmap), and from then on places each request that matches
// the plan, in size and in order, at its planned address. A plan whose ranges cannot be mapped under the limit
// (StepPlanStats::unfit) is not followed: unless a transition plan, costed tick by tick, fits (transition_plan.hpp:
// one step followed with lazy mapping, then its ideal plan, mapped whole), best fit places the next steps and the
// next boundaries pack again while the unfit plans get cheaper (unfit_backoff.hpp). Everything that does not match
// goes to best fit, at once:  - a request whose size is not among the next kLookahead planned ones (an extra tensor,
// another batch, a    data-dependent shape) falls back and leaves the plan's cursor where it is, so the step
// resynchronises with    the plan at the next request that matches;  - a request that matches a planned one further
// on skips the ones between (the step did not make them);  - a request matching a growth entry (a block the step
// keeps without freeing an older copy: a kept batch) is not    planned: it goes above the plan (place_above_plan), so
// it never stays live inside the plan's space;  - a matched request whose planned range is not wholly free (a block
// placed there by a fallback, or left by an    earlier step and not freed yet) or cannot be mapped under the limit
// falls back too. Safety does not rest on the plan being right: the heap places a request at its planned address only
// when the range lies inside one free block (Heap::allocate_at), so a wrong plan costs memory or speed, never
// correctness.
//
// When to pack again: at every boundary while no plan is followed; then from the step just seen when that step
// fell back although the plan came from the first observed step (the first step of a training job allocates its
// optimizer state and warm-up buffers, which later steps do not, and its leftovers cannot be paired yet), or when
// two steps in a row fell back (the workload changed). One odd step (a short last batch) keeps the plan.
// Packing runs off the device's lock (PackJob): begin_boundary() copies what the packer needs under the lock,
// PackJob::pack() runs without it, finish_boundary() installs the plan under the lock again only when nothing was
// allocated or freed meanwhile (StepPlanStats::stale otherwise: best fit goes on and the next boundary packs
// again). Not thread-safe otherwise: plimsoll::Allocator holds the lock for every other call.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <vector>

#include "engine/heap.hpp"
#include "engine/plan_candidates.hpp"
#include "engine/step_plan.hpp"
#include "engine/transition_plan.hpp"
#include "engine/unfit_backoff.hpp"
#include "plimsoll/stats.hpp"
#include "plimsoll/step_plan_options.hpp"

namespace plimsoll::engine {

/// One boundary's packing, copied out of the follower and the heap so that it runs without the device's lock.
struct PackJob {
  StepObservation as_obstacles;  // the step, leftovers carried as obstacles until a tick
  std::vector<Obstacle> obstacles;
  StepObservation pinned;        // the step, leftovers pinned where they are
  std::vector<Obstacle> around_pinned;
  std::vector<Obstacle> older;   // what stays where it is in steady state: around_pinned less the emptying pages
  std::vector<std::uint64_t> emptying;  // the emptying pages the plans were packed for (emptying_pages.hpp)
  HeapSnapshot heap;
  std::uint64_t follower = 0;  // PlanFollower::serial() of the follower that made it
  std::uint64_t events = 0;    // the follower's allocations and frees when it was made
  StepPlan plan;               // pack()'s result
  TransitionPlan transition;   // when `plan` is unfit: one step toward an ideal plan (transition_plan.hpp)
  PlanCost cost;               // the plan's cost on the snapshot
  // In: what the ideal plan (pack_transition) was packed from at a boundary where it missed the limit (0: none);
  // out: the same for this pack. The ideal plan depends on nothing else (the step, the older blocks, the heap's
  // span and limit), so the same inputs miss again, and pack() skips its packing and search: at 1.01 x ResNet-50
  // paid them at every unfit boundary for no transition.
  std::uint64_t missed_ideal = 0;
  std::uint64_t pack_ns = 0;   // how long pack() took

  /// The cheapest candidate plan (best_plan) and its cost; when that plan is unfit, a transition plan toward an
  /// ideal one (pack_transition; `transition.fits` says whether to follow it). Touches nothing shared: call it
  /// without the lock.
  void pack();
  /// For tests of the lock-free window: called at the start of every pack() when set (threads_step_plan_test).
  static inline std::atomic<void (*)()> while_packing{nullptr};
};

class PlanFollower {
 public:
  static constexpr std::size_t kLookahead = 64;
  // A "step" with more requests than this is not one (a program that called plimsoll::step() once and runs on):
  // the follower stops recording it, so its memory stays bounded, and starts again at the next boundary. Packing
  // costs up to the square of the step's requests (off the device's lock, but in the thread calling step()), so
  // the cap also bounds that pause; the shared traces' steps have at most 28,126 requests (MobileNetV2).
  static constexpr std::size_t kMaxStepRequests = std::size_t{1} << 16;

  explicit PlanFollower(Heap& heap, StepPlanOptions options = {})
      : heap_(heap), options_(options), serial_(next_serial_.fetch_add(1) + 1) {}

  /// Planned placement when the request matches the plan, best fit otherwise; 0 when both fail (heap's
  /// last_failure() says why).
  std::uint64_t allocate(std::uint64_t bytes, std::uint16_t tag);
  /// After the heap freed addr.
  /// Never throws: out of host memory for the observation, the step goes unobserved (a plan is an optimisation, and
  /// the device's free must finish its books).
  void freed(std::uint64_t addr, std::uint64_t size) noexcept {
    ++events_;
    if (!observing_) return;
    try {
      observation_.freed(addr, size);
    } catch (const std::bad_alloc&) {
      stop_observing();
    }
  }
  /// While a run plan places the device's requests (run_plan_follower.hpp), the follower only watches: it sees each
  /// request the run plan placed (placed_elsewhere) and each free, keeps its step bookkeeping at boundaries, and
  /// packs and installs no plan of its own (two plans would fight over the same addresses). Released when the run
  /// plan ends: the next boundary packs from the step observed last, as on a device without a run plan.
  void hold_plans(bool held) { held_ = held; }
  /// A request placed by someone else (the run plan) at addr: observed as part of the step, nothing placed.
  void placed_elsewhere(std::uint64_t addr, std::uint64_t size) noexcept {
    ++events_;
    observe(addr, size);
  }
  /// A training step ended and the next begins: begin_boundary, the pack and finish_boundary in one (under the
  /// caller's lock throughout).
  void step_boundary();
  /// The boundary's bookkeeping, and the packing to do when one is due (null otherwise, or while another
  /// boundary's pack is still running).
  std::unique_ptr<PackJob> begin_boundary();
  /// Installs a packed job's plan (maps its ranges), or, when that plan is unfit and the job's transition fits,
  /// begins the transition step instead (its ranges mapped lazily as its requests come), unless the heap saw
  /// allocations or frees since the job was made: then it counts StepPlanStats::stale and changes nothing.
  void finish_boundary(std::unique_ptr<PackJob> job);
  /// Unique per follower for the process: tells a job's follower from a newer one made at the same address.
  std::uint64_t serial() const { return serial_; }

  const StepPlanStats& stats() const { return stats_; }
  const StepPlan& plan() const { return plan_; }

 private:
  std::uint64_t fall_back(std::uint64_t bytes, std::uint16_t tag, std::uint64_t StepPlanStats::*reason);
  std::uint64_t place_above_plan(std::uint64_t bytes, std::uint16_t tag);
  bool page_still_live(std::uint64_t page) const;  // an emptying page (emptying_pages_) not emptied yet
  void observe(std::uint64_t addr, std::uint64_t size) noexcept;
  /// Until the next boundary: a step too long to be one, or one whose observation ran out of host memory.
  void stop_observing() noexcept {
    observation_.clear();
    observing_ = false;
  }
  std::unique_ptr<PackJob> prepare_pack();
  /// A boundary's books for the step that begins: no fallbacks yet, the plan's cursor at its start, an empty
  /// observation whose leftovers pair with those of the step just ended.
  void start_step(StepObservation::LeftoverPositions leftovers, bool previous_fell_back);
  void install(StepPlan plan, const PlanCost& cost, bool reset_backoff = true);
  // Transition steps (transition_plan.hpp): plan_ is the transition plan for one step, followed with lazy mapping
  // (follow_transition); at the next boundary the ideal plan is mapped whole and followed (end_transition).
  // Invariant: transition_ implies ideal_ has entries, and transition_kept_ marks exactly the granules of the
  // transition entries placed so far this step (kept mapped: the steps after use them).
  void begin_transition(TransitionPlan transition);
  void end_transition();
  void abandon_transition();  // at the transition step's first fallback: best fit for the rest of the step
  void stop_transition();
  std::uint64_t follow_transition(std::size_t match, std::uint64_t bytes, std::uint16_t tag, std::uint64_t hint);
  bool transition_ = false;
  StepPlan ideal_;
  std::vector<bool> transition_kept_;
  std::uint64_t maps_before_transition_ = 0, unmaps_before_transition_ = 0;
  std::uint64_t transition_unfit_granules_ = 0;
  std::uint64_t missed_ideal_ = 0;  // PackJob::missed_ideal of the last pack  // the unfit steady plan's: an abandoned transition counts as it
  bool ideal_on_trial_ = false;  // the ideal plan's first step is under way: the back-off resets if it falls back not

  Heap& heap_;
  StepPlanOptions options_;
  StepObservation observation_;
  bool observing_ = false;  // from the first boundary on, but for the rest of a step too long to be one
  StepPlan plan_;           // empty: none active
  std::size_t cursor_ = 0;  // the next planned request of this step
  bool first_plan_ = false;          // plan_ was packed from the first observed step
  // The small pages plan_ expects to empty (PackJob::emptying), and whether the step under way gave its plan up
  // (best fit for the rest of it, as an abandoned transition does: fall_back).
  std::vector<std::uint64_t> emptying_pages_;
  bool step_given_up_ = false;
  std::uint64_t step_fallbacks_ = 0;  // in the step under way
  bool previous_step_fell_back_ = false;
  std::uint64_t next_try_ = 0;  // the boundary (stats_.steps) from which packing is tried again after unfit plans
  UnfitBackoff unfit_backoff_;  // when to pack again after unfit plans (growing steps or not)
  std::uint64_t stale_run_ = 0;  // stale packs in a row: how long to wait before packing again after one
  StepPlanStats stats_;
  std::uint64_t events_ = 0;  // allocations and frees seen: a pack made at one count is stale at another
  bool packing_ = false;      // a job is out (between begin_boundary and finish_boundary)
  bool held_ = false;         // hold_plans: a run plan places the requests; watch, never pack
  std::uint64_t serial_;
  static inline std::atomic<std::uint64_t> next_serial_{0};
};

}  // namespace plimsoll::engine
