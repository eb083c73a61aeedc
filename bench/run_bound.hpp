#pragma once
// The whole-run bound: a trace's requests through a step packed offline by the engine's whole-run packing
// (engine/run_packing.hpp, which also says what the figures mean), and here, for the bench only, that packing
// followed on a simulated heap at the limit, to check that a heap placing every request at its planned address maps
// what the packing counts.
#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/run_input.hpp"
#include "engine/run_packing.hpp"
#include "engine/step_plan.hpp"
#include "plimsoll/trace.hpp"

namespace plimsoll::bench {

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

}  // namespace plimsoll::bench
