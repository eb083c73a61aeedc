#pragma once
// Checks of whole-run packings shared by the engine's and the bench's tests (engine/run_packing.hpp).
#include <gtest/gtest.h>

#include <cstddef>

#include "engine/step_plan.hpp"

namespace plimsoll::testing {

// Every two requests whose lifetimes meet lie apart in the plan: the packing is one any allocator could follow.
inline void expect_valid(const plimsoll::engine::StepObservation& run, const plimsoll::engine::StepPlan& plan) {
  ASSERT_EQ(plan.entries.size(), run.requests.size());
  const auto died = [&](std::size_t i) {
    return run.requests[i].died == plimsoll::engine::StepObservation::kOutlives ? run.ticks : run.requests[i].died;
  };
  for (std::size_t i = 0; i < run.requests.size(); ++i) {
    EXPECT_EQ(plan.entries[i].size, run.requests[i].size);
    EXPECT_NE(plan.entries[i].addr, 0u);
    for (std::size_t j = i + 1; j < run.requests.size(); ++j) {
      const bool meet = run.requests[i].born < died(j) && run.requests[j].born < died(i);
      const bool apart = plan.entries[i].addr + plan.entries[i].size <= plan.entries[j].addr ||
                         plan.entries[j].addr + plan.entries[j].size <= plan.entries[i].addr;
      EXPECT_TRUE(!meet || apart) << "requests " << i << " and " << j << " overlap while both live";
    }
  }
}

}  // namespace plimsoll::testing
