#pragma once
// A rebuilt step replayed under one allocator: plimsoll's engine on a simulated device, or the models of
// PyTorch's caching allocator and TensorFlow's BFC (allocator_models.hpp).
#include <cstdint>
#include <optional>

#include "plimsoll/plan.hpp"
#include "plimsoll/trace.hpp"

namespace plimsoll::plan {

/// Replays `step` under `allocator` with `device_bytes` of device (unset: as much as it takes). Fills the peaks,
/// what fills the peak, and, when it runs out, `fits = false` and the out-of-memory report.
AllocatorPrediction replay_under(const Trace& step, PlanAllocator allocator,
                                 std::optional<std::uint64_t> device_bytes);

}  // namespace plimsoll::plan
