#pragma once
// Step-aware placement, part 1c: a bounded search that improves a packed step (ruin and recreate).
//
// The greedy packings of pack_step place each request once, in one order; on steps of a few medium sizes (the
// batch-16 ResNet-18 traces: 9, 4.5, 2.25, 1.69 and 1.13 MiB tensors) every order leaves a few MiB of holes
// above the step's peak of live bytes. The search starts from a valid plan and repeats one move: take out a few
// entries (those at the top of the plan and the ones live at the same time just below them, or every entry on
// one granule nothing else pays for), place them again in another order (by size, by lifetime, or shuffled), each
// where the packer's own rules put it, and keep the result only when it scores no worse. The score is, in order:
// the granules the entries cover that `paid` does not (with a granule: what plan_cost counts beyond the live
// blocks), the footprint, the bytes that reach into the plan's top 2 MiB (so a move that lowers one of several
// entries at the top counts as progress), and how crowded the unpaid granules are (a sum of sqrt(entries on each)).
// Accepting equal scores lets it walk across plateaus.
//
// Invariants: every plan it holds is valid (StepPlan's invariants: each re-placement goes through the packer's
// collect/place, against every entry whose lifetime meets it and every obstacle; a move that would leave the span
// is undone); pinned and growth entries never move; the score never rises, so the result is never worse than
// `start`. Deterministic: a fixed-seed generator and a budget counted in work, never in time, so the same input
// gives the same plan on every machine. A unit is one element walked: per re-placement, each entry (or block of 64)
// examined for a lifetime that meets it and each obstacle copied; per move, the entries and granules walked twice
// (choosing, scoring). The search also stops after `patience` moves in a row that lowered nothing.
#include <cstdint>
#include <vector>

#include "engine/step_plan.hpp"

namespace plimsoll::engine {

struct SearchOptions {
  std::uint64_t budget = 0;  // work units (see above); 0: no move, `start` comes back as it is
  /// Non-zero: the granule size, and the score counts first the granules not in `paid` (indexed from base) that
  /// the entries cover; re-placements then also use the granule-aware rule. Zero: the footprint alone.
  std::uint64_t granule = 0;
  const std::vector<bool>* paid = nullptr;
  std::uint64_t seed = 0x5eed;
  /// Stop after this many moves in a row that lowered nothing (the plan has settled; the rest of the budget would
  /// be spent walking plateaus).
  std::uint64_t patience = 5'000;
};

struct SearchReport {
  std::uint64_t work = 0;      // units spent (at most budget plus one move's worth)
  std::uint64_t moves = 0;     // moves tried
  std::uint64_t accepted = 0;  // moves kept (no worse)
  std::uint64_t improved = 0;  // moves that lowered the score
};

/// Improves `start`, a plan pack_step made of `step` around `obstacles` in [base, base + span). Returns a plan at
/// least as good by the score above (an empty plan stays empty).
StepPlan improve_plan(const StepObservation& step, const std::vector<Obstacle>& obstacles, std::uint64_t base,
                      std::uint64_t span, const StepPlan& start, const SearchOptions& options,
                      SearchReport* report = nullptr);

/// The most bytes a plan of the step must hold at one tick: its requests (each over [born, died) and, when it
/// outlives the step, [0, held_until) too; growth requests are not planned) and the obstacles (each over
/// [0, until)). In a valid plan these bytes are disjoint, so no packing of the step around those obstacles, by any
/// packer, has a smaller footprint above them, nor covers fewer granules than this many bytes fill.
std::uint64_t step_max_load(const StepObservation& step, const std::vector<Obstacle>& obstacles = {});

}  // namespace plimsoll::engine
