#pragma once
// Step-aware placement, part 1: what one training step asked for, and the plan packed from it offline.
//
// A training step repeats the same requests in the same order. Once one step has been seen whole (sizes, order,
// lifetimes), the next steps can be laid out in advance, as static-graph memory planners lay out a graph: every
// request gets a fixed address, chosen so that requests alive at the same time never share bytes and the whole
// step fits in little more than its peak of live bytes. src/engine/plan_follower.hpp places requests by this plan.
#include <array>
#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

namespace plimsoll::engine {

/// A range of addresses the plan must leave alone for the whole step: memory live before the observed step
/// began (weights, optimizer state, small pages), which the step does not free.
struct Obstacle {
  std::uint64_t addr = 0, size = 0;
  std::uint32_t until = UINT32_MAX;  // in the range [0, until) of the step's ticks; past its end: the whole step
};

/// One step as the allocator saw it: each allocation, in order, with its lifetime in the step's own clock
/// (one tick per allocation or free), and the frees of blocks older than the step.
/// Invariants:
///  - requests are in allocation order; requests[i].born < requests[i+1].born;
///  - born < died <= ticks for every request; died == kOutlives while it has not been freed in the step;
///  - live maps the address of each request still live to its index in requests (and nothing else);
///  - older_frees are in tick order, each tick < ticks.
/// Lifetimes that cross a boundary: a request the step does not free (a step's gradients, freed by the next
/// step's zero_grad) has, in the plan, a second interval [0, held_until): the previous step's copy of it, still
/// live at the start of the step. pack_step's caller sets held_until and pinned (step_plan.cpp, plan_follower.cpp).
struct StepObservation {
  static constexpr std::uint32_t kOutlives = UINT32_MAX;
  /// Which rule gave a leftover its held_until (pair_leftovers).
  enum class Pairing : std::uint8_t {
    none,      // not a leftover (freed in the step), or not paired yet
    identity,  // its previous copy known by address: the step before's leftover at its position among its size
    order,     // identity unknown: the next free of an older block of its size, in free order
  };
  struct Request {
    std::uint64_t size = 0;  // rounded (Heap::round)
    std::uint32_t born = 0;
    std::uint32_t died = kOutlives;
    std::uint32_t held_until = 0;  // outliving requests: the previous step's copy lives [0, held_until)
    std::uint64_t pinned = 0;      // outliving requests: the address both copies share (0: the packer chooses)
    bool growth = false;  // outlives the step with no copy freed in it (a kept batch): not planned (Entry::addr 0)
    Pairing paired_by = Pairing::none;
  };
  struct OlderFree {
    std::uint64_t size = 0;
    std::uint32_t tick = 0;
    std::uint64_t addr = 0;
  };
  /// Where the step before left its leftovers: for each size, by position among that step's allocations of the
  /// size, the leftover's address (0: the request at that position was freed in its step). Empty when unknown (the
  /// first observed step, or one after a step that went unobserved). Set by the caller at each boundary from
  /// leftover_positions() of the step just ended (PlanFollower::begin_boundary); clear() forgets it.
  using LeftoverPositions = std::unordered_map<std::uint64_t, std::vector<std::uint64_t>>;
  std::vector<Request> requests;
  std::vector<OlderFree> older_frees;
  std::uint32_t ticks = 0;
  std::unordered_map<std::uint64_t, std::uint32_t> live;
  LeftoverPositions previous_leftovers;

  void allocated(std::uint64_t addr, std::uint64_t size);
  /// A free of a block of `size` rounded bytes. A block older than the step joins older_frees.
  void freed(std::uint64_t addr, std::uint64_t size);
  /// This step's leftovers by size and position among the step's allocations of their size: the next step's
  /// previous_leftovers.
  LeftoverPositions leftover_positions() const;
  /// Pairs each request the step did not free (a leftover) with the free, in this step, of its previous copy, and
  /// pins the request where its block lies now, so both copies share one range: held_until is that free's tick.
  /// Steps repeat their requests in order, so the previous copy of the i-th request of a size is the block that was
  /// the i-th request of that size in the step before; where previous_leftovers holds that block's address, the
  /// pair is the free of that address (Pairing::identity), and a copy not freed in the step, or freed only after
  /// the new one is born (the two cannot share a range), leaves the request unpaired. Where it does not for some
  /// leftover (the first observed step, a step after a change of shapes), the whole step is paired by the order rule
  /// (Pairing::order): leftovers in allocation order take the frees of older blocks of their size in free order (a
  /// mix, identity where known and order for the rest, paired MobileNetV2's step 1 worse: 154 `occupied` fallbacks
  /// at 1.01 x over its 13 steps instead of 32). That
  /// rule pairs gradients (made in backward order, freed in forward order) with the wrong copy: on the shared
  /// traces' third step it was wrong for 149 of the 161 ResNet-50 leftovers whose copy is freed before they are
  /// born and 74 of GPT's 76, by identity 0 (bench/experiments/leftover_pairing.py). An unpaired request (no copy
  /// freed in the step: gradients and optimizer state of the first observed step alike) keeps its range for the
  /// whole step: held_until = ticks. Safety does not rest on the pairing (a planned range still live falls back:
  /// Heap::allocate_at places only inside free blocks); a wrong tick costs fallbacks and, for a plan packed for
  /// emptying pages, a step given up to best fit (PlanFollower::fall_back).
  void pair_leftovers();
  /// The other way to carry leftovers into the plan: each stays where it is, an obstacle only until the tick its
  /// pair is freed (the whole step when unpaired), and its next copy is placed by the packer like any request,
  /// with [0, held_until) reserved for the copy after it (0 when unpaired). Returns those obstacles.
  std::vector<Obstacle> leftovers_as_obstacles();
  /// Forgets the step, previous_leftovers included.
  void clear();
};


/// The packed step.
/// Invariants (checked by pack_step's callers in tests/engine_step_plan_test.cpp, and relied on by the follower):
///  - entries are the observation's requests, in order, with the same sizes;
///  - growth requests' entries have addr 0 and take no place in the plan; the rules below are about the others;
///  - every entry lies inside [base, base + span) and is quantum-aligned;
///  - two entries whose lifetimes overlap never overlap in addresses, and no entry overlaps an obstacle (a
///    request that outlives the step is live over [born, ticks) and [0, held_until));
///  - a pinned request's entry is at its pinned address;
///  - footprint is the highest entry end minus base: the address space the plan needs above the base.
struct StepPlan {
  struct Entry {
    std::uint64_t size = 0;
    std::uint64_t addr = 0;  // 0: not planned (a growth request): the follower places it by best fit
  };
  std::vector<Entry> entries;
  /// For each entry, up to kNeighbours entries that end at or below its address, nearest first: when one of them
  /// is live, the heap's search for the entry's free block starts there (Heap::allocate_at's hint).
  static constexpr std::size_t kNeighbours = 4;
  std::vector<std::array<std::uint32_t, kNeighbours>> below;
  std::uint64_t footprint = 0;
  std::uint64_t peak_live = 0;  // the observed step's own peak of live bytes (outliving requests included)
};

/// Which requests the packer places first (the larger key first; ties: larger size, then longer lifetime).
enum class PackOrder {
  size,      // greedy by size, as static memory planners do
  lifetime,  // longest-lived first: what lives long settles low, short-lived requests share what is above
  area,      // size x lifetime
};
struct PackOptions {
  PackOrder order = PackOrder::size;
  bool best_fit = true;     // the smallest gap that holds a request; false: the lowest address that does
  bool slide_down = false;  // a second pass that moves each entry, lowest first, to the lowest free place
  /// Granule-aware packing (non-zero: the granule size; base must be a multiple of it): each request goes where it
  /// covers the fewest granules that neither `paid` (indexed from base: granules mapped anyway) nor an entry
  /// placed before it covers, instead of best_fit's rule. slide_down is not applied.
  std::uint64_t granule = 0;
  const std::vector<bool>* paid = nullptr;
};

/// Packs the step offline: pinned requests at their addresses, then the rest in `options.order`, each where
/// `options` says (by default best fit by size, the greedy-by-size order of static memory planners) among the
/// places where it meets no obstacle and no request already placed whose lifetime overlaps its own. Requests that
/// outlive the step are live from birth to the end of the step: the blocks they leave behind are assumed freed
/// before the next step needs their place (the follower checks, at run time). O(requests^2), twice with
/// slide_down. Empty (no entries) when the plan does not fit in [base, base + span).
StepPlan pack_step(const StepObservation& step, std::vector<Obstacle> obstacles, std::uint64_t base,
                   std::uint64_t span, PackOptions options = {});

/// Merged address ranges [addr, addr + size) that the plan's entries cover: what must stay mapped.
std::vector<std::pair<std::uint64_t, std::uint64_t>> covered_ranges(const StepPlan& plan);

}  // namespace plimsoll::engine
