#pragma once
// `plimsoll plan --html`: predicted peak reserved (solid) and peak live (dashed) against the batch size, one line
// per allocator, with the device's size across: one self-contained page (inline SVG, no script, no network).
#include <cstdint>
#include <string>
#include <vector>

#include "plimsoll/plan.hpp"

namespace plimsoll::plan {

/// Predicts at `points` batch sizes spread over [1, up_to_batch] plus the recorded ones, and draws them.
std::string plan_chart_html(const StepModel& model, std::uint64_t device_bytes,
                            const std::vector<PlanAllocator>& allocators, std::uint64_t up_to_batch,
                            std::size_t points = 32);

}  // namespace plimsoll::plan
