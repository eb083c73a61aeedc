#pragma once
// A trace with its last training step repeated: the shared traces hold three steps, so "steady state" after the
// steps a plan learns from is one step long. Repeating the last step shows what a long run does.
#include <cstddef>

#include "plimsoll/trace.hpp"

namespace plimsoll::telemetry {

/// The most repeats repeat_last_step takes: each copies a whole step, and a long job's behaviour shows well
/// before this.
inline constexpr std::size_t kMaxStepRepeats = 1000;

/// Returns `trace` with its last step (Trace::steps.back()) replayed `times` more times after it, before the
/// teardown, as steps numbered on from it (with "step N begin/end" markers when the trace's steps came from
/// markers). Each copy allocates fresh slots. A free in the step of a block older than the step (last step's
/// gradients) frees, in a copy, the block the copy before it left live in its place: the k-th born older block of
/// a size pairs with the k-th born leftover of that size (a block the step allocates and keeps). A leftover with
/// no such pair (a leak, state the step made for good) stays live in every copy until the teardown, which frees
/// them first; a free of an older block with no leftover to pair with (memory the job freed once) is not repeated.
/// The teardown's frees of paired leftovers free the last copy's. Peak live, counts and slots are recomputed.
/// `times` 0 gives the trace back as it is, steps or none. Throws InvalidArgument naming the fix when `times` is
/// over kMaxStepRepeats, the trace has no steps, or the copies would need more than 2^32 slots. The trace is taken
/// by value so that a caller done with it (move it in) holds one copy of its events, not two.
Trace repeat_last_step(Trace trace, std::size_t times);

/// Throws InvalidArgument naming the fix when `times` is over kMaxStepRepeats (for a caller that checks its
/// options before reading any trace).
void check_step_repeats(std::size_t times);

}  // namespace plimsoll::telemetry
