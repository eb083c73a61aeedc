#pragma once
// The whole-run packing: every request of a trace, from its first event through a step, packed offline at once
// with exact lifetimes, by the engine's own packer (step_plan.hpp) and search (plan_search.hpp), as one long "step"
// with nothing before it. What an allocator that knows the entire run in advance (a run plan, run_plan.hpp, packed
// from an earlier run of the same job) can reach, in the engine's model:
//  - every block rounded as the heap rounds it (Heap::round, 256 bytes), placed at a 256-byte-aligned address;
//  - the device's limit counts mapped 2 MiB granules (Heap::allocate_at: mapped bytes + the granules a block
//    needs against the limit), so a packing needs the granules its entries cover, united;
//  - no small pages: a planned request of at most 1 MiB is placed by Heap::allocate_at like any other, inside a
//    free large block at its planned address, so the pages best fit carves small requests from are not part of
//    a plan's count (they would only add granules);
//  - the granule count (RunPacking::granules) is of a mapping that only grows: every granule an entry ever covers
//    stays mapped to the end, i.e. no unmap at all, from event 0 on (stricter than the target, which allows maps
//    and unmaps in step 0). mapped_peaks gives the same plan's count when unmaps are allowed: always (a follower
//    that unmaps a granule once no live entry covers it), or through step 0 only (the target's rule). The max load
//    is the bound that no placement, with or without unmapping, can beat.
// Invariant: the packing returned is a valid StepPlan of the observation (pack_step's and improve_plan's own):
// requests whose lifetimes meet never share a byte.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "engine/run_input.hpp"
#include "engine/run_plan.hpp"
#include "engine/step_plan.hpp"
#include "plimsoll/trace.hpp"

namespace plimsoll::engine {

inline constexpr std::uint64_t kRunGranule = 2ull << 20;

/// The base address pack_run packs at (a packing's entries are absolute addresses from it; a RunPlan's offsets are
/// from it).
inline constexpr std::uint64_t kRunBase = 1ull << 40;

/// Events [0, end) as one observation: each allocation a request from its tick to its free's, or to the end
/// (outliving, with nothing held before it: held_until 0, never pinned, never growth, so every request is planned).
StepObservation observe_run(const Trace& trace, std::size_t end);

/// The granules (`granule` bytes, counted from `base`, a multiple of it) that the plan's entries cover, united.
std::uint64_t covered_granules(const StepPlan& plan, std::uint64_t base, std::uint64_t granule);

struct RunPacking {
  std::size_t requests = 0;
  std::uint64_t max_load = 0;           // the most rounded bytes live at one tick: no packing holds less
  std::uint64_t max_load_granules = 0;  // max_load in granules, rounded up: the lower bound
  std::uint64_t greedy_granules = 0;    // the best greedy packing's covered granules
  std::string greedy_name;              // which packing that was
  std::uint64_t granules = 0;           // after the search: what the best packing found needs
  std::uint64_t footprint = 0;          // that packing's address span, bytes
  double search_ms = 0;
  StepPlan plan;                        // that packing (entries in request order, addresses from kRunBase)
};

/// Progress on long runs: one line per stage ("packing 3 of 14: ..."), for stderr.
using RunProgress = std::function<void(const std::string&)>;

/// How hard pack_run searches. `seeds` searches (seeds 0x5eed, 0x5eed + 1, ...), each from the best greedy packing
/// (from every one with all_starts), with `work` units and `patience` (SearchOptions); the plan covering the fewest
/// granules is kept.
struct RunSearch {
  std::uint64_t work = 50'000'000;
  std::uint64_t seeds = 1;
  std::uint64_t patience = 5'000;
  bool all_starts = false;  // search from every greedy packing, not only the one covering the fewest granules
};

/// Packs the observation every greedy way (greedy_packings.hpp) and improves the one covering the fewest granules
/// with the bounded search (granule-scored; work 0: none). Stops searching once the max load's granules are reached.
RunPacking pack_run(const StepObservation& run, const RunSearch& search, const RunProgress& progress = {});

/// A plan's peak of mapped granules when the follower may unmap a granule once no live entry covers it:
/// `unmapping`, always (the peak over time of the granules live entries cover); `unmap_until`, only before tick
/// `unmap_until` (from then on nothing is unmapped: the mapping only grows). unmap_until 0 gives covered_granules.
struct MappedPeaks {
  std::uint64_t unmapping = 0;
  std::uint64_t unmap_until = 0;
};
MappedPeaks mapped_peaks(const StepObservation& run, const StepPlan& plan, std::uint64_t base, std::uint64_t granule,
                         std::uint32_t unmap_until);

/// What a run plan records of a packing (run_plan.hpp).
struct RunPlanSource {
  std::uint64_t limit = 0;        // the limit it was packed against (bytes)
  std::size_t through_step = 0;   // the last step (trace.steps index) its events cover
  std::string source;             // the trace's path
};

/// The packing as a run plan: offsets from kRunBase, granule kRunGranule, the fingerprint from its first
/// requests, its covered granules. Throws InvalidState when the packing left a request unplanned (pack_run never
/// does).
RunPlan make_run_plan(const RunPacking& packing, const RunPlanSource& source);

/// What `plimsoll run-plan` asks for: how far into the trace, the limit (both 0: the target's, run_limit), how hard
/// to search, and whether a plan over the limit is still wanted.
struct RunPlanRequest {
  std::optional<std::int64_t> through_step;  // as given: checked by step_index
  double over_live = 0;
  double plus_mib = 0;
  RunSearch search;
  bool force = false;
};

/// A trace packed into a run plan, with what the packing found.
struct PackedRunPlan {
  RunPlan plan;
  RunPacking packing;              // its plan is `plan`'s, at addresses from kRunBase
  std::size_t events = 0;          // events [0, events) of the trace were packed
  std::uint64_t peak_live = 0;     // the trace's peak of live bytes (what the limit is of)
  std::uint64_t limit_granules = 0;  // the limit in whole granules: what a follower at the limit may map
  bool fits = false;               // packing.granules <= limit_granules
  double seconds = 0;              // packing, greedy and search together
};

/// Packs `trace` (run_input.hpp's checks first: the step, the limit) into a run plan. Refuses, with
/// InvalidArgument naming the trace, the granules and the fix, a limit below the max load (no plan can fit: refused
/// before packing) and a packing that does not fit the limit, unless `force` (then `fits` says so): a plan over its
/// limit is of no use to a follower at that limit.
PackedRunPlan pack_run_plan(const Trace& trace, const RunPlanRequest& request, const RunProgress& progress = {});

}  // namespace plimsoll::engine
