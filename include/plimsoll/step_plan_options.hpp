#pragma once
// Options of step-aware placement for one device (Allocator::set_step_plan_options; docs/engine.md, "Step-aware
// placement").

namespace plimsoll {

struct StepPlanOptions {
  /// A small page that holds nothing but the step's leftovers paired with older frees counts as empty once the next
  /// step has freed them (src/engine/emptying_pages.hpp): on, the default, a plan may reuse it; off, the page is an
  /// obstacle for the whole step, as before that rule (its tests replay GPT's transition step so).
  bool reuse_emptying_pages = true;
};

}  // namespace plimsoll
