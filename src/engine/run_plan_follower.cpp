#include "engine/run_plan_follower.hpp"

#include <algorithm>
#include <new>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "plimsoll/size.hpp"

namespace plimsoll {

std::string_view to_string(RunPlanStats::End end) noexcept {
  switch (end) {
    case RunPlanStats::End::none: return "none";
    case RunPlanStats::End::size: return "size";
    case RunPlanStats::End::fingerprint: return "fingerprint";
    case RunPlanStats::End::occupied: return "occupied";
    case RunPlanStats::End::limit: return "limit";
    case RunPlanStats::End::finished: return "finished";
    case RunPlanStats::End::host_memory: return "host_memory";
  }
  return "none";
}

namespace engine {

std::string run_plan_mismatch(const RunPlan& plan, const Heap& heap, const std::string& device) {
  const std::string from = plan.source.empty() ? std::string("the run plan") : "the run plan from " + plan.source;
  if (plan.granule != heap.granules().granule()) {
    return fmt::format("{} was packed for {} granules, and {} maps {} granules; pack it again for this device "
                       "(plimsoll run-plan)",
                       from, format_size(plan.granule), device, format_size(heap.granules().granule()));
  }
  // A plan packed under a limit at most the device's (or under none, 0) places the same blocks under it: the heap
  // enforces its own limit, and a request that passes it ends the plan (RunPlanStats::End::limit). One packed for a
  // higher limit counts on room the device does not have.
  if (plan.limit > heap.options().limit) {
    return fmt::format("{} was packed for a limit of {} bytes, above {}'s {} bytes; pack it again at this limit "
                       "or below (plimsoll run-plan), or give the device at least the plan's limit",
                       from, plan.limit, device, heap.options().limit);
  }
  if (plan.entries.empty()) return from + " has no requests; pack it from a trace that allocates (plimsoll run-plan)";
  return {};
}

RunPlanFollower::RunPlanFollower(Heap& heap, RunPlan plan) : heap_(heap), plan_(std::move(plan)) {
  stats_.loaded = true;
  stats_.entries = plan_.entries.size();
}

std::uint64_t RunPlanFollower::map_ahead() {
  const std::uint64_t granule = heap_.granules().granule();
  std::uint64_t top = 0;
  for (const RunPlan::Entry& entry : plan_.entries) top = std::max(top, entry.offset + entry.size);
  if (top > heap_.span_bytes()) return 0;  // its first request past the span ends it (occupied)
  std::vector<bool> covered((top + granule - 1) / granule, false);
  std::uint64_t count = 0;
  for (const RunPlan::Entry& entry : plan_.entries)
    for (std::uint64_t g = entry.offset / granule; g < (entry.offset + entry.size + granule - 1) / granule; ++g)
      if (!covered[g]) {
        covered[g] = true;
        ++count;
      }
  if (count * granule > heap_.options().limit) return 0;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;  // runs of covered granules, sorted, disjoint
  for (std::uint64_t g = 0; g < covered.size();) {
    if (!covered[g]) {
      ++g;
      continue;
    }
    std::uint64_t end = g;
    while (end < covered.size() && covered[end]) ++end;
    ranges.emplace_back(heap_.base() + g * granule, (end - g) * granule);
    g = end;
  }
  const std::uint64_t before = heap_.mapped_bytes();
  if (!heap_.map_ranges(ranges)) return 0;  // the backing refused: mapped lazily instead, nothing left mapped
  stats_.mapped_ahead = heap_.mapped_bytes() - before;
  return stats_.mapped_ahead;
}

std::uint64_t RunPlanFollower::allocate(std::uint64_t bytes, std::uint16_t tag, bool* ended, StreamOrder* streams,
                                        StreamHandle stream) {
  *ended = false;
  if (heap_.paused()) [[unlikely]] return heap_.allocate(bytes, tag);  // refused (HeapFailure::paused), not a mismatch
  if (next_ >= plan_.entries.size()) {
    end(RunPlanStats::End::finished);
    *ended = true;
    return 0;
  }
  const std::uint64_t size = Heap::round(bytes);
  const RunPlan::Entry& entry = plan_.entries[next_];
  if (size != entry.size) {
    // Among the first requests the plan's fingerprint says whose run it is: a mismatch there is another job's plan.
    end(next_ < plan_.fingerprint.size() ? RunPlanStats::End::fingerprint : RunPlanStats::End::size);
    *ended = true;
    return 0;
  }
  if (next_ < plan_.fingerprint.size() && plan_.fingerprint[next_] != size) {  // a plan whose own books disagree
    end(RunPlanStats::End::fingerprint);
    *ended = true;
    return 0;
  }
  // The last block placed, when still live and below, starts the heap's search for the range's free block.
  const std::uint64_t addr = heap_.base() + entry.offset;
  const std::uint64_t hint = last_ != 0 && last_ < addr && heap_.find_live(last_) ? last_ : 0;
  std::uint64_t placed = place(addr, bytes, tag, hint);
  if (placed == 0 && heap_.last_failure() == HeapFailure::occupied && streams != nullptr &&
      streams->unpark_range(addr, entry.size, stream)) {
    // The range was held by blocks freed on this request's own stream, whose queued work still used them (the host
    // ahead of the GPU): stream order makes them this stream's to take now (StreamOrder::unpark_range).
    placed = place(addr, bytes, tag, heap_.find_live(hint) ? hint : 0);
    if (placed != 0) ++stats_.unparked;
    else streams->settle_unparked();  // freed early and not placed: wait until no stream's work uses them
  }
  if (placed != 0) {
    ++next_;
    ++stats_.placed;
    last_ = placed;
    return placed;
  }
  switch (heap_.last_failure()) {
    case HeapFailure::occupied: end(RunPlanStats::End::occupied); break;
    case HeapFailure::host_memory: end(RunPlanStats::End::host_memory); break;
    case HeapFailure::paused: return 0;  // cannot happen (tested above); not the plan's fault
    default: end(RunPlanStats::End::limit); break;  // the limit, or the backing refused the granules
  }
  *ended = true;
  return 0;
}

std::uint64_t RunPlanFollower::place(std::uint64_t addr, std::uint64_t bytes, std::uint16_t tag, std::uint64_t hint) {
  const std::uint64_t size = Heap::round(bytes);
  std::uint64_t placed = heap_.allocate_at(addr, bytes, tag, hint);
  if (placed == 0 && heap_.last_failure() == HeapFailure::limit) {
    // The range's granules are over the limit while cached granules (mapped, in free blocks) are not needed by any
    // live block: give back as few of them as make room (Heap::map_ranges), then place. A plan packed to fit only
    // with unmaps (ResNet-18 at batch 128 through step 1: 402 granules unmapping, 403 not) is followed so; one that
    // fits without them never gets here.
    // Runs inside the device's noexcept try_allocate: out of host memory for map_ranges' books (taken before it
    // changes anything), the plan ends for the limit instead.
    bool room = false;
    try {
      room = heap_.map_ranges({{addr, size}});
    } catch (const std::bad_alloc&) {
    }
    if (room) {
      placed = heap_.allocate_at(addr, bytes, tag, hint);
      if (placed != 0) ++stats_.made_room;
    }
  }
  return placed;
}

bool RunPlanFollower::at_boundary() {
  if (active() && next_ >= plan_.entries.size()) end(RunPlanStats::End::finished);
  return !active();
}

void RunPlanFollower::end(RunPlanStats::End why) {
  if (!active()) return;
  stats_.ended_by = why;
  stats_.ended_at = next_;
  // The entries are not needed any more: a whole run's plan can hold hundreds of thousands.
  plan_.entries = {};
  plan_.entries.shrink_to_fit();
}

}  // namespace engine
}  // namespace plimsoll
