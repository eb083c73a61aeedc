// plimsoll_run_plan_check: a run plan file (plimsoll run-plan) followed on a simulated heap at its own limit, against
// the trace it was packed from: every request placed by Heap::allocate_at at base + its offset, nothing unmapped
// (bench/run_bound.hpp's follow_on_heap). What a follower at that limit would see, without the device around it:
// requests placed, the peak of mapped granules (the plan's covered_granules when it is sound), maps and unmaps, the
// heap's self-check.
//   plimsoll_run_plan_check PLAN TRACE
#include <cstdio>
#include <exception>
#include <string>

#include "engine/run_packing.hpp"
#include "engine/run_plan.hpp"
#include "plimsoll/trace.hpp"
#include "run_bound.hpp"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: plimsoll_run_plan_check PLAN TRACE\n");
    return 2;
  }
  try {
    const plimsoll::engine::RunPlan plan = plimsoll::engine::read_run_plan(argv[1]);
    const plimsoll::Trace trace = plimsoll::read_trace(argv[2]);
    plimsoll::engine::StepPlan as_packed;  // the packer's addresses again: kRunBase + offset
    for (const auto& e : plan.entries) as_packed.entries.push_back({e.size, plimsoll::engine::kRunBase + e.offset});
    const plimsoll::bench::Followed followed =
        plimsoll::bench::follow_on_heap(trace, trace.events.size(), as_packed, plan.limit, false);
    std::printf("%s: %zu of %zu requests placed, peak %llu granules mapped (plan: %llu, limit %llu), %llu maps, "
                "%llu unmaps, self check: %s\n",
                argv[1], followed.placed, plan.entries.size(),
                static_cast<unsigned long long>(followed.peak_granules),
                static_cast<unsigned long long>(plan.covered_granules),
                static_cast<unsigned long long>(plan.limit / plan.granule),
                static_cast<unsigned long long>(followed.maps), static_cast<unsigned long long>(followed.unmaps),
                followed.self_check.empty() ? "sound" : followed.self_check.c_str());
    return followed.placed == plan.entries.size() && followed.self_check.empty() ? 0 : 1;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "error: %s\n", error.what());
    return 2;
  }
}
