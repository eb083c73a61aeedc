#pragma once
// Step-aware placement: the small pages a plan may reuse once the step's leftovers in them are freed.
//
// Requests of at most HeapOptions::small_max bytes that best fit places go into small pages (large blocks of
// small_page bytes), and a page goes back to the large class when its last block is freed (Heap::deallocate). At a
// boundary the plan packs around every live page, and before this a page was an obstacle for the whole step. But a
// page may hold nothing but the step's leftovers that pair with a free of an older block of their size (small
// gradients: the next step frees them at those ticks, then makes its own copies, which the plan places elsewhere).
// Such a page is empty from the latest of those ticks on: an obstacle until then, and no obstacle at all in the steady
// state the ideal plan packs for (transition_plan.hpp), where the leftovers' copies live at their planned addresses.
// Holding it whole cost ResNet-50 seven pages at 1.01 x and GPT two, the granules their plans missed the limit by
// (docs/engine.md, "Against the target").
// Safety does not rest on it: a page that does not empty (a block best fit put there meanwhile, a leftover the
// pairing misjudged) only makes the planned requests over it fall back (Heap::allocate_at places inside free blocks).
#include <cstdint>
#include <unordered_map>
#include <unordered_set>

#include "engine/heap.hpp"
#include "engine/step_plan.hpp"

namespace plimsoll::engine {

struct EmptyingPages {
  std::unordered_map<std::uint64_t, std::uint32_t> until;  // page address -> the tick its last leftover is freed
  std::unordered_set<std::uint64_t> leftovers;             // the addresses of the leftovers in those pages
  bool empty() const { return until.empty(); }
};

/// The live small pages of `heap` whose live blocks are all leftovers of `paired` (an observed step after
/// StepObservation::pair_leftovers, whose `live` maps each leftover's address to its request) paired with an older
/// free before they were born (held_until < ticks) and not growth, with the tick by which the last of them is freed
/// in the next step. O(heap's blocks).
EmptyingPages emptying_pages(const Heap& heap, const StepObservation& paired);

}  // namespace plimsoll::engine
