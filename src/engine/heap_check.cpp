// Heap::self_check: the heap's invariants, checked from its own records. The sanitizer CI build runs it inside
// the engine (PLIMSOLL_HEAP_SELF_CHECK, see heap.hpp); tests/engine_heap_checker.hpp checks the same heap from
// outside, against an independent model of what was allocated.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unordered_map>

#include "engine/heap.hpp"

namespace plimsoll::engine {

namespace {
std::string at(const char* what, std::uint64_t addr) { return std::string(what) + " at " + std::to_string(addr); }
}  // namespace

std::string Heap::self_check() const {
  // Every free block sits in its class's bins exactly once (block.hpp).
  std::unordered_map<BlockIndex, int> in_large, in_small;
  std::uint64_t binned_large = 0, binned_small = 0;
  large_bins_.for_each(blocks_, [&](BlockIndex i) { ++in_large[i]; binned_large += blocks_[i].size; });
  small_bins_.for_each(blocks_, [&](BlockIndex i) { ++in_small[i]; binned_small += blocks_[i].size; });
  if (binned_large != large_bins_.free_bytes()) return "large bins' byte count differs from their blocks";
  if (binned_small != small_bins_.free_bytes()) return "small bins' byte count differs from their blocks";

  std::uint64_t used = 0, requested = 0, live = 0, free_large = 0, free_small = 0, free_blocks_large = 0,
                free_blocks_small = 0;
  // One span: the blocks tile [begin, end), linked both ways, no two free neighbours, each in the right books.
  auto span = [&](BlockIndex head, std::uint64_t begin, std::uint64_t end, bool small) -> std::string {
    std::uint64_t expect = begin;
    BlockIndex prev = kNoBlock;
    bool prev_free = false;
    for (BlockIndex i = head; i != kNoBlock; prev = i, i = blocks_[i].next) {
      const Block& b = blocks_[i];
      if (b.addr != expect) return at("a gap or overlap between blocks", expect);
      if (b.prev != prev) return at("a block's back link is wrong", b.addr);
      if (b.size == 0 || b.size % kQuantum != 0 || b.addr % kQuantum != 0) return at("a misaligned block", b.addr);
      if (b.small != small) return at("a block in the wrong size class", b.addr);
      if (b.free && prev_free) return at("two free neighbours were not coalesced", b.addr);
      prev_free = b.free;
      expect = b.addr + b.size;
      if (b.free) {
        if ((small ? in_small : in_large)[i] != 1) return at("a free block is not in its bins exactly once", b.addr);
        (small ? free_small : free_large) += b.size;
        ++(small ? free_blocks_small : free_blocks_large);
        continue;
      }
      if (in_large.count(i) != 0 || in_small.count(i) != 0) return at("a used block sits in a bin", b.addr);
      // While paused (heap_pause.cpp) nothing is mapped, used blocks included: checked below.
      for (std::uint64_t g = granules_.first_covering(b.addr); g < granules_.end_covering(b.addr, b.size); ++g)
        if (!granules_.is_mapped(g) && paused_ == nullptr) return at("a used block is not mapped", b.addr);
      if (b.page) {
        if (pages_.find(b.addr) != i) return at("a small page is missing from the page map", b.addr);
        continue;
      }
      if (live_.find(b.addr) != i) return at("a used block is missing from the address map", b.addr);
      used += b.size;
      requested += b.requested;
      ++live;
    }
    if (expect != end) return at("the blocks stop short of the span's end", expect);
    return {};
  };
  if (std::string problem = span(first_block_, base_, base_ + span_bytes_, false); !problem.empty()) return problem;
  std::string page_problem;
  pages_.for_each([&](std::uint64_t addr, BlockIndex page) {
    if (page_problem.empty()) page_problem = span(blocks_[page].span_head, addr, addr + blocks_[page].size, true);
  });
  if (!page_problem.empty()) return page_problem;

  if (free_large != large_bins_.free_bytes() || free_blocks_large != in_large.size())
    return "the large bins hold blocks that are not free blocks of the reservation";
  if (free_small != small_bins_.free_bytes() || free_blocks_small != in_small.size())
    return "the small bins hold blocks that are not free blocks of a page";
  if (live != live_.size()) return "the address map holds addresses that are not used blocks";
  if (used != counters_.in_use) return "in-use bytes differ from the used blocks";
  if (requested != counters_.requested) return "requested bytes differ from the used blocks";
  std::uint64_t mapped = 0;
  for (std::uint64_t g = 0; g < span_bytes_ / granules_.granule(); ++g) mapped += granules_.is_mapped(g);
  if (mapped * granules_.granule() != granules_.mapped_bytes()) return "the mapped-granule count differs from the map";
  if (paused_ != nullptr && granules_.mapped_bytes() != 0) return "a paused heap has mapped granules";
  if (granules_.mapped_bytes() > std::max(options_.limit, options_.preallocate ? span_bytes_ : 0))
    return "more is mapped than the limit";
  return {};
}

bool heap_self_check_enabled() {
#if defined(PLIMSOLL_HEAP_SELF_CHECK)
  return true;
#else
  return false;
#endif
}

void Heap::verify_now() const {
  if (std::string problem = self_check(); !problem.empty()) {
    std::fprintf(stderr, "plimsoll: heap self-check failed: %s\n", problem.c_str());
    std::abort();
  }
}

}  // namespace plimsoll::engine
