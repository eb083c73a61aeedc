// The whole-run bound's follower on a simulated heap (run_bound.hpp); the packing itself is the engine's
// (engine/run_packing.hpp).
#include "run_bound.hpp"

#include <algorithm>
#include <vector>

#include "backings/sim_backing.hpp"
#include "engine/heap.hpp"

namespace plimsoll::bench {

Followed follow_on_heap(const Trace& trace, std::size_t end, const engine::StepPlan& plan, std::uint64_t limit,
                        bool unmap) {
  backings::SimBacking sim(std::max<std::uint64_t>(64ull << 30, limit));
  engine::HeapOptions options;
  options.limit = limit;
  engine::Heap heap(sim, options);
  Followed followed;
  std::vector<std::uint64_t> addr_of(trace.slots, 0);
  for (std::size_t i = 0; i < end && i < trace.events.size(); ++i) {
    const TraceEvent& e = trace.events[i];
    if (e.kind == TraceEvent::Kind::allocate) {
      if (followed.requests >= plan.entries.size()) break;
      const engine::StepPlan::Entry& entry = plan.entries[followed.requests++];
      addr_of[e.slot] = heap.allocate_at(heap.base() + (entry.addr - engine::kRunBase), e.bytes, 1);
      if (addr_of[e.slot] != 0) ++followed.placed;
    } else if (e.kind == TraceEvent::Kind::free && addr_of[e.slot] != 0) {
      engine::Heap::Freed freed;
      (void)heap.deallocate(addr_of[e.slot], freed);
      addr_of[e.slot] = 0;
      if (unmap) (void)heap.release_cached();
    }
  }
  followed.peak_granules = heap.counters().peak_mapped / engine::kRunGranule;
  followed.maps = heap.counters().maps;
  followed.unmaps = heap.counters().unmaps;
  followed.self_check = heap.self_check();
  return followed;
}

}  // namespace plimsoll::bench
