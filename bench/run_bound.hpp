#pragma once
// The whole-run bound of step-aware placement: every request of a trace, from its first event through a step,
// packed offline at once with exact lifetimes, by the engine's own packer (step_plan.hpp) and search
// (plan_search.hpp), as one long "step" with nothing before it. What an allocator that knew the entire run in
// advance (a plan saved from an earlier run of the same job) could reach, in the engine's model:
//  - every block rounded as the heap rounds it (Heap::round, 256 bytes), placed at a 256-byte-aligned address;
//  - the device's limit counts mapped 2 MiB granules (Heap::allocate_at: mapped bytes + the granules a block
//    needs against the limit), so a packing needs the granules its entries cover, united;
//  - no small pages: a planned request of at most 1 MiB is placed by Heap::allocate_at like any other, inside a
//    free large block at its planned address, so the pages best fit carves small requests from are not part of
//    a plan's count (they would only add granules);
//  - the granule count (RunBound::granules) is of a mapping that only grows: every granule an entry ever covers
//    stays mapped to the end, i.e. no unmap at all, from event 0 on (stricter than the target, which allows maps
//    and unmaps in step 0). mapped_peaks gives the same plan's count when unmaps are allowed: always (a follower
//    that unmaps a granule once no live entry covers it), or through step 0 only (the target's rule). The max load
//    is the bound that no placement, with or without unmapping, can beat.
// Invariant: the packing returned is a valid StepPlan of the observation (pack_step's and improve_plan's own).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/step_plan.hpp"
#include "plimsoll/trace.hpp"

namespace plimsoll::bench {

inline constexpr std::uint64_t kRunGranule = 2ull << 20;

/// --through-step as given (a signed number, so that -1 is not read as 2^64 - 1): the step index, or none. Throws
/// InvalidArgument naming the value and the fix when it is negative.
std::optional<std::size_t> step_index(std::optional<std::int64_t> given);

/// The end (an index into trace.events, exclusive) of the events through step `through` (an index into
/// trace.steps), or of the whole trace when none is given. Throws InvalidArgument naming the trace, how many steps
/// it has and the fix when `through` is past its last step.
std::size_t run_end(const Trace& trace, std::optional<std::size_t> through);

/// Events [0, end) as one observation: each allocation a request from its tick to its free's, or to the end
/// (outliving, with nothing held before it: held_until 0, never pinned, never growth, so every request is planned).
engine::StepObservation observe_run(const Trace& trace, std::size_t end);

/// The granules (`granule` bytes, counted from `base`, a multiple of it) that the plan's entries cover, united.
std::uint64_t covered_granules(const engine::StepPlan& plan, std::uint64_t base, std::uint64_t granule);

struct RunBound {
  std::size_t requests = 0;
  std::uint64_t max_load = 0;           // the most rounded bytes live at one tick: no packing holds less
  std::uint64_t max_load_granules = 0;  // max_load in granules, rounded up: the lower bound
  std::uint64_t greedy_granules = 0;    // the best greedy packing's covered granules
  std::string greedy_name;              // which packing that was
  std::uint64_t granules = 0;           // after the search: what the best packing found needs
  std::uint64_t footprint = 0;          // that packing's address span, bytes
  double search_ms = 0;
  engine::StepPlan plan;                // that packing (entries in request order)
};

/// Progress on long runs: one line per stage ("packing 3 of 10: ..."), for stderr.
using RunProgress = std::function<void(const std::string&)>;

/// Packs the observation every greedy way the step bound uses (by size, lifetime and size x lifetime, best and
/// first fit; granule-aware by size and by area) and improves the one covering the fewest granules with the
/// bounded search (granule-scored; work 0: none).
/// `seeds` searches (seeds 0x5eed, 0x5eed + 1, ...), each from the best greedy packing (from every one with
/// all_starts), with `work` units and `patience` (SearchOptions); the plan covering the fewest granules is kept.
struct RunSearch {
  std::uint64_t work = 50'000'000;
  std::uint64_t seeds = 1;
  std::uint64_t patience = 5'000;
  bool all_starts = false;  // search from every greedy packing, not only the one covering the fewest granules
};
RunBound pack_run(const engine::StepObservation& run, const RunSearch& search, const RunProgress& progress = {});

/// The limit replay's options give a trace with this peak of live bytes: ceil(over_live x peak) for
/// --limit-over-live, peak + plus_mib MiB for --limit-plus-mib (exactly one above 0), in whole granules: how many
/// the heap may map (Heap::allocate_at refuses a granule that would pass the limit).
std::uint64_t limit_bytes(std::uint64_t peak_live, double over_live, double plus_mib);

/// The limit a trace is packed against: limit_bytes with the options given, or with neither (both 0) the issue-16
/// target's: 1.01 x peak live over 1 GiB live, peak live + 4 MiB under.
std::uint64_t run_limit(std::uint64_t peak_live, double over_live, double plus_mib);

/// A trace read and checked, ready to pack: its end (run_end), its limit (run_limit) and where step 0 ends (an
/// index into its events; 0 without steps).
struct PreparedRun {
  Trace trace;
  std::size_t end = 0;
  std::uint64_t limit = 0;
  std::size_t step0_end = 0;
};

/// Every trace checked (the step index, the step, the limit) before any is packed: a bad last trace must not cost
/// the others' minutes. Throws InvalidArgument naming the trace and the fix.
std::vector<PreparedRun> prepare_runs(std::vector<Trace> traces, std::optional<std::int64_t> through, double over_live,
                                      double plus_mib);

/// The tick (StepObservation's count of allocations and frees) at which events [0, end) have all happened.
std::uint32_t tick_at(const Trace& trace, std::size_t end);

/// A plan's peak of mapped granules when the follower may unmap a granule once no live entry covers it:
/// `unmapping`, always (the peak over time of the granules live entries cover); `unmap_until`, only before tick
/// `unmap_until` (from then on nothing is unmapped: the mapping only grows). unmap_until 0 gives covered_granules.
struct MappedPeaks {
  std::uint64_t unmapping = 0;
  std::uint64_t unmap_until = 0;
};
MappedPeaks mapped_peaks(const engine::StepObservation& run, const engine::StepPlan& plan, std::uint64_t base,
                         std::uint64_t granule, std::uint32_t unmap_until);

/// A plan followed on a real heap (follow_on_heap).
struct Followed {
  std::size_t requests = 0;
  std::size_t placed = 0;          // placed at their planned address by Heap::allocate_at
  std::uint64_t peak_granules = 0; // the heap's peak of mapped bytes, in granules: what the device's limit sees
  std::uint64_t maps = 0;
  std::uint64_t unmaps = 0;
  std::string self_check;          // Heap::self_check's complaint, empty when the heap is sound
};

/// Follows a pack_run plan of events [0, end) on a SimBacking under engine::Heap at `limit`: every request placed by
/// Heap::allocate_at at its planned address (one not placed is counted and skipped, its free too); with `unmap`,
/// cached granules released after every free (Heap::release_cached), as a follower that unmaps as it frees would.
Followed follow_on_heap(const Trace& trace, std::size_t end, const engine::StepPlan& plan, std::uint64_t limit,
                        bool unmap);

/// The base address pack_run packs at (plans' entries are absolute addresses from it).
inline constexpr std::uint64_t kRunBase = 1ull << 40;

}  // namespace plimsoll::bench
