#pragma once
// A recording cut to what `plimsoll plan` models: the events before the first step (weights, ...) and the first
// `steps` training steps, as allocations and frees. A marker inside a step other than its own end (plimsoll
// train's "epoch N evaluation", which comes before the last step's end) ends that step; allocations made from
// there to the next step are left out, their frees of modelled allocations kept.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "plimsoll/trace.hpp"

namespace plimsoll::plan {

struct SequenceAllocation {
  std::uint64_t bytes = 0;
  std::uint16_t tag = 0;     // index into the trace's tags
  std::uint32_t site = 0;    // index into the trace's sites
  std::uint32_t segment = 0;  // 0: before the first step; k: step k (1-based, in order)
};

struct SequenceOp {
  std::uint32_t allocation = 0;  // index into StepSequence::allocations
  bool is_free = false;
};

struct StepSequence {
  std::vector<SequenceAllocation> allocations{};
  std::vector<SequenceOp> ops{};
  std::vector<std::size_t> segment_begin{};  // index into ops where each segment begins; one per segment
  std::size_t segments() const { return segment_begin.size(); }
  std::size_t segment_end(std::size_t segment) const {
    return segment + 1 < segment_begin.size() ? segment_begin[segment + 1] : ops.size();
  }
};

/// Cuts `trace` to its events before the first step and its first `steps` steps (at most trace.steps.size()).
StepSequence cut_steps(const Trace& trace, std::size_t steps);

}  // namespace plimsoll::plan
