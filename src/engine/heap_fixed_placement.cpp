// The heap's two entry points for step-aware placement (src/engine/plan_follower.hpp): placing a request at an
// address chosen in advance, and mapping a plan's ranges at a step boundary. Kept out of heap.cpp, whose best-fit
// path they do not touch.
#include <algorithm>
#include <vector>

#include "engine/heap.hpp"

namespace plimsoll::engine {

// Walks the span's blocks in address order from the hint's block (a live large block below addr), or from the
// span's start: O(blocks between them), done only for planned requests.
BlockIndex Heap::free_block_covering(std::uint64_t addr, std::uint64_t size, std::uint64_t hint) const {
  BlockIndex start = hint != 0 && hint < addr ? live_.find(hint) : kNoBlock;
  if (start == kNoBlock || blocks_[start].small) start = first_block_;
  for (BlockIndex i = start; i != kNoBlock; i = blocks_[i].next) {
    const Block& block = blocks_[i];
    if (block.addr + block.size <= addr) continue;
    if (!block.free || block.addr > addr || addr + size > block.addr + block.size) return kNoBlock;
    return i;
  }
  return kNoBlock;
}

std::uint64_t Heap::allocate_at(std::uint64_t addr, std::uint64_t bytes, std::uint16_t tag, std::uint64_t hint) {
  failure_ = HeapFailure::none;
  if (paused_ != nullptr) [[unlikely]] {  // nothing may be mapped while paused (heap_pause.cpp)
    failure_ = HeapFailure::paused;
    return 0;
  }
  const std::uint64_t size = round(bytes);
  if (bytes > span_bytes_ || addr < base_ || addr + size > base_ + span_bytes_ || addr % kQuantum != 0) {
    failure_ = HeapFailure::occupied;
    return 0;
  }
  const BlockIndex block = free_block_covering(addr, size, hint);
  if (block == kNoBlock) {
    failure_ = HeapFailure::occupied;
    return 0;
  }
  if (!books_ready()) [[unlikely]] {  // before anything changes, as allocate() (heap.hpp)
    failure_ = HeapFailure::host_memory;
    return 0;
  }
  const std::uint64_t first = granules_.first_covering(addr);
  const std::uint64_t last = granules_.end_covering(addr, size);
  const std::uint64_t missing = granules_.count_unmapped(first, last) * granules_.granule();
  // Under the limit only, never by giving back cached granules: those were mapped for requests that fell back
  // and will likely come again, and unmapping them here would map and unmap every step. Best fit takes over.
  if (missing > 0) {
    if (granules_.mapped_bytes() + missing > options_.limit) {
      failure_ = HeapFailure::limit;
      return 0;
    }
    if (!map_exactly(first, last)) return 0;
  }
  return finish_allocation(take(large_bins_, block, addr, size), bytes, tag);
}

bool Heap::map_ranges(const std::vector<std::pair<std::uint64_t, std::uint64_t>>& ranges,
                      const std::vector<bool>* keep) {
  if (paused_ != nullptr) return false;  // nothing may be mapped while paused (heap_pause.cpp)
  const std::uint64_t count = span_bytes_ / granules_.granule();
  std::vector<bool> wanted(count, false);
  std::uint64_t missing = 0;
  for (const auto& [addr, size] : ranges) {
    if (size == 0 || addr < base_ || addr + size > base_ + span_bytes_) return false;
    for (std::uint64_t g = granules_.first_covering(addr); g < granules_.end_covering(addr, size); ++g) {
      if (!wanted[g] && !granules_.is_mapped(g)) missing += granules_.granule();
      wanted[g] = true;
    }
  }
  if (granules_.mapped_bytes() + missing > options_.limit) {
    // Give back cached granules (whole granules in free blocks) that no range needs, as few as will do; none
    // when that would not be enough.
    if (options_.preallocate) return false;
    std::uint64_t spare = 0;
    large_bins_.for_each(blocks_, [&](BlockIndex index) {
      const Block& block = blocks_[index];
      for (std::uint64_t g = granules_.first_inside(block.addr); g < granules_.end_inside(block.addr, block.size); ++g)
        if (!wanted[g] && !(keep != nullptr && g < keep->size() && (*keep)[g]) && granules_.is_mapped(g))
          spare += granules_.granule();
    });
    if (granules_.mapped_bytes() + missing - spare > options_.limit) return false;
    large_bins_.for_each(blocks_, [&](BlockIndex index) {
      const Block& block = blocks_[index];
      const std::uint64_t lo = granules_.first_inside(block.addr);
      const std::uint64_t hi = granules_.end_inside(block.addr, block.size);
      for (std::uint64_t g = lo; g < hi && granules_.mapped_bytes() + missing > options_.limit;) {
        if (wanted[g] || (keep != nullptr && g < keep->size() && (*keep)[g]) || !granules_.is_mapped(g)) {
          ++g;
          continue;
        }
        const std::uint64_t excess =
            (granules_.mapped_bytes() + missing - options_.limit + granules_.granule() - 1) / granules_.granule();
        std::uint64_t end = g;
        while (end < hi && end - g < excess && !wanted[end] && !(keep != nullptr && end < keep->size() && (*keep)[end]) &&
               granules_.is_mapped(end))
          ++end;
        unmap_range(g, end - g);  // one call per run
        g = end;
      }
    });
    if (granules_.mapped_bytes() + missing > options_.limit) return false;
  }
  // Map the wanted runs (a wanted unmapped granule lies in free memory: live blocks are always mapped). All or
  // nothing: when the backing refuses a run, the runs mapped before it are unmapped again, so a refused plan
  // leaves no granules mapped that no block or plan needs.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> mapped_runs;  // (first granule, end)
  for (std::uint64_t g = 0; g < count;) {
    if (!wanted[g] || granules_.is_mapped(g)) {
      ++g;
      continue;
    }
    std::uint64_t end = g;
    while (end < count && wanted[end] && !granules_.is_mapped(end)) ++end;
    if (!map_exactly(g, end)) {
      for (const auto& [first, last] : mapped_runs) unmap_range(first, last - first);
      return false;
    }
    mapped_runs.emplace_back(g, end);
    g = end;
  }
  return true;
}

}  // namespace plimsoll::engine
