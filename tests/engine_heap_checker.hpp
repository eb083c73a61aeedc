#pragma once
// An independent check of engine::Heap. It keeps its own model of what is live (from the calls made, not
// from the heap's books) and compares it with a walk of the heap's blocks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

#include "engine/heap.hpp"

namespace plimsoll::testing {

class HeapChecker {
 public:
  explicit HeapChecker(const engine::Heap& heap) : heap_(heap) {}

  // Local invariants of one successful allocation.
  void allocated(std::uint64_t addr, std::uint64_t requested) {
    const std::uint64_t size = engine::Heap::round(requested);
    ASSERT_NE(addr, 0u);
    ASSERT_EQ(addr % 256, 0u) << "misaligned";
    ASSERT_GE(addr, heap_.base());
    ASSERT_LE(addr + size, heap_.base() + heap_.span_bytes()) << "outside the reservation";
    auto next = live_.lower_bound(addr);
    if (next != live_.end()) {
      ASSERT_LE(addr + size, next->first) << "overlaps the next live block";
    }
    if (next != live_.begin()) {
      auto prev = std::prev(next);
      ASSERT_LE(prev->first + prev->second.size, addr) << "overlaps the previous live block";
    }
    const auto& g = heap_.granules();
    for (std::uint64_t i = g.first_covering(addr); i < g.end_covering(addr, size); ++i)
      ASSERT_TRUE(g.is_mapped(i)) << "allocated memory is not mapped";
    live_[addr] = Live{size, requested};
    in_use_ += size;
  }

  void freed(std::uint64_t addr) {
    auto it = live_.find(addr);
    ASSERT_NE(it, live_.end());
    in_use_ -= it->second.size;
    live_.erase(it);
  }

  // The whole heap: tiling, coalescing, accounting, limits.
  void walk() {
    const auto& g = heap_.granules();
    std::vector<engine::BlockView> blocks;
    heap_.walk([&](const engine::BlockView& b) { blocks.push_back(b); });
    std::uint64_t used = 0, free_large = 0, free_small = 0;
    std::map<std::uint64_t, std::uint64_t> used_blocks;
    std::uint64_t expect = heap_.base();
    bool in_pages = false;
    bool previous_free = false;
    std::uint64_t page_end = 0, small_expect = 0, pages_seen = 0;
    pages_.clear();
    for (const auto& b : blocks) {
      ASSERT_GT(b.size, 0u);
      ASSERT_EQ(b.addr % 256, 0u);
      ASSERT_EQ(b.size % 256, 0u);
      if (!in_pages && b.small) in_pages = true;
      if (!in_pages) {
        ASSERT_EQ(b.addr, expect) << "the reservation's blocks leave a gap or overlap";
        expect = b.addr + b.size;
        ASSERT_FALSE(b.free && previous_free) << "two free neighbours were not coalesced";
        previous_free = b.free;
        if (b.free) free_large += b.size;
        else if (!b.page) { used += b.size; used_blocks[b.addr] = b.size; }
        if (b.page) page_sizes_check(b);
      } else {
        ASSERT_TRUE(b.small);
        if (small_expect == page_end) {  // the last page is covered: a new one starts
          ASSERT_TRUE(pages_.count(b.addr)) << "small blocks outside any page";
          page_end = b.addr + pages_[b.addr];
          small_expect = b.addr;
          previous_free = false;
          ++pages_seen;
        }
        ASSERT_EQ(b.addr, small_expect) << "a page's blocks leave a gap or overlap";
        small_expect += b.size;
        ASSERT_LE(small_expect, page_end);
        ASSERT_FALSE(b.free && previous_free) << "two free small neighbours were not coalesced";
        previous_free = b.free;
        if (b.free) free_small += b.size;
        else { used += b.size; used_blocks[b.addr] = b.size; }
      }
      if (!b.free) {
        for (std::uint64_t i = g.first_covering(b.addr); i < g.end_covering(b.addr, b.size); ++i) {
          ASSERT_TRUE(g.is_mapped(i)) << "a used block is not mapped";
        }
      }
    }
    ASSERT_EQ(expect, heap_.base() + heap_.span_bytes()) << "the blocks do not cover the reservation";
    ASSERT_EQ(small_expect, page_end) << "a page's blocks do not cover it";
    ASSERT_EQ(pages_seen, pages_.size()) << "a page was not walked, or walked twice";
    ASSERT_EQ(used, in_use_) << "in-use bytes differ from the model";
    ASSERT_EQ(heap_.counters().in_use, in_use_);
    ASSERT_EQ(used_blocks.size(), live_.size());
    for (const auto& [addr, live] : live_) {
      auto found = used_blocks.find(addr);
      ASSERT_NE(found, used_blocks.end()) << "a live allocation is missing from the heap";
      ASSERT_EQ(found->second, live.size);
    }
    ASSERT_EQ(free_large, heap_.free_bytes_large()) << "large bins' bytes differ from the free blocks";
    ASSERT_EQ(free_small, heap_.free_bytes_small()) << "small bins' bytes differ from the free blocks";
    std::uint64_t mapped = 0;
    for (std::uint64_t i = 0; i < heap_.span_bytes() / g.granule(); ++i) mapped += g.is_mapped(i);
    ASSERT_EQ(mapped * g.granule(), g.mapped_bytes());
    ASSERT_LE(g.mapped_bytes(), heap_.options().limit) << "the limit was exceeded";
    ASSERT_EQ(heap_.live_allocations(), live_.size());
  }

  const std::map<std::uint64_t, std::uint64_t>& pages() const { return pages_; }
  struct Live {
    std::uint64_t size, requested;
  };
  const std::map<std::uint64_t, Live>& live() const { return live_; }

 private:
  void page_sizes_check(const engine::BlockView& page) { pages_[page.addr] = page.size; }

  const engine::Heap& heap_;
  std::map<std::uint64_t, Live> live_;
  std::map<std::uint64_t, std::uint64_t> pages_;
  std::uint64_t in_use_ = 0;
};

}  // namespace plimsoll::testing
