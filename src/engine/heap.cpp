#include "engine/heap.hpp"

#include <algorithm>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "engine/paused_state.hpp"
#include "plimsoll/error.hpp"
#include "plimsoll/size.hpp"
#include "util/checked_math.hpp"

namespace plimsoll::engine {

namespace {
constexpr std::uint64_t kMaxAddressSpace = 1ull << 46;  // 64 TiB: far below any 48-bit address space
#if defined(PLIMSOLL_HEAP_SELF_CHECK)
constexpr bool kSelfCheck = true;  // sanitizer builds: heap_check.cpp's walk every Heap::kSelfCheckEvery operations
#else
constexpr bool kSelfCheck = false;
#endif

}  // namespace

Heap::Heap(backings::Backing& backing, HeapOptions options) : backing_(backing), options_(options) {
  // Room for the first allocations' records (and their drops) from the start, before anything is reserved:
  // books_ready() then asks for more only once a heap holds dozens of blocks.
  if (!blocks_.ready(kInitialRecords)) throw std::bad_alloc();
  const std::uint64_t granule = backing_.granularity();
  if (options_.small_page % granule != 0 && granule % options_.small_page != 0)
    throw InvalidArgument("small_page must divide or be a multiple of the backing's granularity");
  const std::uint64_t limit = std::max(util::round_down(options_.limit, granule), granule);
  span_bytes_ = options_.preallocate
                    ? limit
                    : std::min(util::round_up(limit, granule) * options_.address_space_factor, kMaxAddressSpace);
  base_ = backing_.reserve(span_bytes_);
  if (base_ == 0)
    throw Error("cannot reserve " + format_size(span_bytes_) + " of address space on " + backing_.describe() +
                "; lower the memory limit");
  granules_ = GranuleMap(base_, span_bytes_, granule);
  if (options_.preallocate) {
    if (!backing_.map(base_, span_bytes_)) {
      backing_.unreserve(base_, span_bytes_);
      throw Error("cannot preallocate " + format_size(span_bytes_) + " on " + backing_.describe() +
                  ": the device has " + format_size(backing_.memory().free_bytes) +
                  " free; lower memory_limit or memory_fraction, or use the on_demand policy");
    }
    granules_.set(0, span_bytes_ / granule, true);
    counters_.maps = 1;
    counters_.peak_mapped = span_bytes_;
  }
  first_block_ = blocks_.make(Block{.addr = base_, .size = span_bytes_});
  large_bins_.insert(blocks_, first_block_);
}

Heap::~Heap() {
  paused_.reset();  // gives the host copies back; nothing is mapped while paused
  granules_.for_each_run(0, span_bytes_ / granules_.granule(), true, [&](std::uint64_t first, std::uint64_t count) {
    backing_.unmap(granules_.address_of(first), count * granules_.granule());
  });
  backing_.unreserve(base_, span_bytes_);
}

std::uint64_t Heap::allocate(std::uint64_t bytes, std::uint16_t tag) {
  failure_ = HeapFailure::none;
  if (paused_ != nullptr) [[unlikely]] {
    failure_ = HeapFailure::paused;
    return 0;
  }
  if (bytes > span_bytes_) {
    failure_ = HeapFailure::too_large;
    return 0;
  }
  if (!books_ready()) [[unlikely]] {
    failure_ = HeapFailure::host_memory;
    return 0;
  }
  const std::uint64_t size = round(bytes);
  BlockIndex index = size <= options_.small_max ? allocate_small(size) : allocate_large(size);
  if (index == kNoBlock) return 0;
  return finish_allocation(index, bytes, tag);
}

std::uint64_t Heap::finish_allocation(BlockIndex index, std::uint64_t bytes, std::uint16_t tag) {
  const std::uint64_t size = blocks_[index].size;
  Block& block = blocks_[index];
  block.free = false;
  block.tag = tag;
  block.requested = bytes;
  live_.insert(block.addr, index);
  counters_.in_use += size;
  counters_.requested += bytes;
  counters_.peak_in_use = std::max(counters_.peak_in_use, counters_.in_use);
  ++counters_.allocations;
  if constexpr (kSelfCheck) after_operation();
  return block.addr;
}

BlockIndex Heap::allocate_large(std::uint64_t size) {
  const BlockIndex best_fit = large_bins_.find(blocks_, size);
  if (best_fit == kNoBlock) {
    failure_ = HeapFailure::address_space;  // unmapping granules would not make address space
    return kNoBlock;
  }
  const std::uint64_t addr = blocks_[best_fit].addr;
  if (granules_.all_mapped(granules_.first_covering(addr), granules_.end_covering(addr, size)))
    return take(large_bins_, best_fit, addr, size);
  return allocate_large_growing(size);
}

BlockIndex Heap::allocate_large_growing(std::uint64_t size) {
  // The growth path, rare once a job is warm. Mapped memory elsewhere beats the best fit: put the block
  // where it needs the fewest new granules (often none), so a step whose frees came in another order
  // reuses what the first step mapped instead of mapping more.
  Placement placement = fewest_new_granules(size);
  bool mapped = ensure_mapped(placement, size);
  // At the limit: give back only as many cached granules as the placement lacks, none under it.
  if (!mapped && failure_ == HeapFailure::limit && release_cached_outside(placement, size))
    mapped = ensure_mapped(placement, size);
  if (!mapped) {  // before reporting out of memory: give back every cached granule and place once more
    release_cached();
    placement = fewest_new_granules(size);
    mapped = placement.block != kNoBlock && ensure_mapped(placement, size);
  }
  return mapped ? take(large_bins_, placement.block, placement.addr, size) : kNoBlock;
}

// Unmaps whole cached granules (inside free blocks, outside the placement's range) until the placement's
// missing granules fit under the limit. False, with what it unmapped left unmapped, when they cannot.
bool Heap::release_cached_outside(const Placement& placement, std::uint64_t size) {
  const std::uint64_t keep_first = granules_.first_covering(placement.addr);
  const std::uint64_t keep_last = granules_.end_covering(placement.addr, size);
  const std::uint64_t missing = granules_.count_unmapped(keep_first, keep_last) * granules_.granule();
  if (missing > options_.limit) return false;
  const auto over = [&] { return granules_.mapped_bytes() + missing > options_.limit; };
  large_bins_.for_each(blocks_, [&](BlockIndex index) {
    if (!over()) return;
    const Block& block = blocks_[index];
    const std::uint64_t first = granules_.first_inside(block.addr);
    const std::uint64_t last = granules_.end_inside(block.addr, block.size);
    const std::pair<std::uint64_t, std::uint64_t> outside[] = {{first, std::min(last, keep_first)},
                                                               {std::max(first, keep_last), last}};
    for (const auto& [lo, hi] : outside) {
      granules_.for_each_run(lo, hi, true, [&](std::uint64_t f, std::uint64_t n) {
        if (!over()) return;
        const std::uint64_t excess = granules_.mapped_bytes() + missing - options_.limit;
        unmap_range(f, std::min(n, (excess + granules_.granule() - 1) / granules_.granule()));
      });
    }
  });
  return !over();
}

Heap::Placement Heap::fewest_new_granules(std::uint64_t size) const {
  Placement best;
  std::uint64_t best_missing = UINT64_MAX;
  large_bins_.for_each(blocks_, [&](BlockIndex index) {
    const Block& block = blocks_[index];
    if (block.size < size) return;
    for (std::uint64_t addr : {block.addr, block.addr + block.size - size}) {
      const std::uint64_t missing =
          granules_.count_unmapped(granules_.first_covering(addr), granules_.end_covering(addr, size));
      if (missing < best_missing || (missing == best_missing && block.size < blocks_[best.block].size)) {
        best = Placement{index, addr};
        best_missing = missing;
      }
    }
  });
  return best;
}

BlockIndex Heap::allocate_small(std::uint64_t size) {
  BlockIndex index = small_bins_.find(blocks_, size);
  if (index == kNoBlock) {
    BlockIndex page = allocate_large(options_.small_page);
    if (page == kNoBlock) return kNoBlock;
    Block& page_block = blocks_[page];
    page_block.free = false;
    page_block.page = true;
    index = blocks_.make_free(page_block.addr, page_block.size, kNoBlock, kNoBlock, true);
    blocks_[page].span_head = index;
    pages_.insert(blocks_[page].addr, page);
    small_bins_.insert(blocks_, index);
  }
  return take(small_bins_, index, blocks_[index].addr, size);
}

// Takes [addr, addr + size) out of free block `index`; what is left on either side stays free in `bins`.
// The part below keeps the record, so a span's first record never changes.
BlockIndex Heap::take(FreeBins& bins, BlockIndex index, std::uint64_t addr, std::uint64_t size) {
  bins.remove(blocks_, index);
  if (addr > blocks_[index].addr) {
    Block& lower = blocks_[index];
    const BlockIndex upper = blocks_.make_free(addr, lower.addr + lower.size - addr, index, lower.next, lower.small);
    Block& below = blocks_[index];  // make() may have moved the pool
    if (below.next != kNoBlock) blocks_[below.next].prev = upper;
    below.next = upper;
    below.size = addr - below.addr;
    bins.insert(blocks_, index);
    index = upper;
  }
  if (blocks_[index].size > size) {
    Block& block = blocks_[index];
    const BlockIndex rest = blocks_.make_free(block.addr + size, block.size - size, index, block.next, block.small);
    Block& taken = blocks_[index];
    if (taken.next != kNoBlock) blocks_[taken.next].prev = rest;
    taken.next = rest;
    taken.size = size;
    bins.insert(blocks_, rest);
  }
  blocks_[index].free = false;
  return index;
}

bool Heap::deallocate(std::uint64_t addr, Freed& freed, std::uint32_t refused_tag) {
  const std::size_t slot = live_.slot_of(addr);
  if (slot == AddressMap::kNoSlot) return false;
  BlockIndex index = live_.block_at(slot);
  Block& block = blocks_[index];
  if (block.tag == refused_tag) return false;
  live_.erase_slot(slot);
  freed = Freed{block.size, block.requested, block.tag};
  counters_.in_use -= block.size;
  counters_.requested -= block.requested;
  ++counters_.frees;
  block.free = true;
  block.tag = 0;
  block.requested = 0;
  if (block.small) {
    index = coalesce(small_bins_, index);
    const Block& merged = blocks_[index];
    if (merged.prev == kNoBlock && merged.next == kNoBlock) {  // the whole page is free: return it
      BlockIndex page = pages_.erase(merged.addr);
      blocks_.drop(index);
      free_large(page);
    } else {
      small_bins_.insert(blocks_, index);
    }
  } else {
    free_large(index);
  }
  if (granules_.mapped_bytes() - counters_.in_use > options_.release_threshold &&
      granules_.mapped_bytes() > mapped_after_release_)
    release_cached();
  if constexpr (kSelfCheck) after_operation();
  return true;
}

bool Heap::live_block(std::uint64_t addr, BlockView& view) const {
  const BlockIndex index = live_.find(addr);
  if (index == kNoBlock) return false;
  const Block& b = blocks_[index];
  view = BlockView{b.addr, b.size, b.requested, b.tag, b.free, b.small, b.page};
  return true;
}

void Heap::relabel(std::uint64_t addr, std::uint64_t requested, std::uint16_t tag) {
  Block& block = blocks_[live_.find(addr)];
  counters_.requested = counters_.requested - block.requested + requested;
  block.requested = requested;
  block.tag = tag;
}

std::uint64_t Heap::split_live(std::uint64_t addr, std::uint64_t keep) noexcept {
  if (!blocks_.ready(1) || !live_.ready_for_one()) [[unlikely]] return 0;  // room first: make() and insert() then allocate nothing
  const BlockIndex index = live_.find(addr);
  Block& block = blocks_[index];
  const BlockIndex rest = blocks_.make(Block{.addr = block.addr + keep, .size = block.size - keep, .prev = index,
                                             .next = block.next, .free = false, .small = block.small});
  Block& kept = blocks_[index];  // make() may have moved the pool
  if (kept.next != kNoBlock) blocks_[kept.next].prev = rest;
  kept.next = rest;
  kept.size = keep;
  live_.insert(blocks_[rest].addr, rest);
  return blocks_[rest].addr;
}

void Heap::reset_peaks() {
  counters_.peak_in_use = counters_.in_use;
  counters_.peak_mapped = granules_.mapped_bytes();
}

void Heap::free_large(BlockIndex index) {
  Block& block = blocks_[index];
  block.free = true;
  block.page = false;
  block.span_head = kNoBlock;
  large_bins_.insert(blocks_, coalesce(large_bins_, index));
}

// Merges free block `index` (not in any bin) with its free neighbours, which leave their bins.
// The lower block's record survives, so a span's first record never changes.
BlockIndex Heap::coalesce(FreeBins& bins, BlockIndex index) {
  Block& block = blocks_[index];
  BlockIndex next = block.next;
  if (next != kNoBlock && blocks_[next].free) {
    bins.remove(blocks_, next);
    block.size += blocks_[next].size;
    block.next = blocks_[next].next;
    if (block.next != kNoBlock) blocks_[block.next].prev = index;
    blocks_.drop(next);
  }
  BlockIndex prev = block.prev;
  if (prev != kNoBlock && blocks_[prev].free) {
    bins.remove(blocks_, prev);
    Block& lower = blocks_[prev];
    lower.size += block.size;
    lower.next = block.next;
    if (lower.next != kNoBlock) blocks_[lower.next].prev = prev;
    blocks_.drop(index);
    index = prev;
  }
  return index;
}

// Maps the granules that [placement.addr, + size) needs. When it must grow, it also maps ahead into the rest
// of the placement's free block, so that the footprint grows geometrically (up to the limit) rather than one
// granule at a time: the steps after the first then run without map calls. Sets failure_ either way.
bool Heap::ensure_mapped(const Placement& placement, std::uint64_t size) {
  const Block& block = blocks_[placement.block];
  const std::uint64_t first = granules_.first_covering(placement.addr);
  std::uint64_t last = granules_.end_covering(placement.addr, size);
  const std::uint64_t granule = granules_.granule();
  const std::uint64_t missing = granules_.count_unmapped(first, last) * granule;
  failure_ = HeapFailure::none;
  if (missing == 0) return true;
  const std::uint64_t mapped = granules_.mapped_bytes();
  if (mapped + missing > options_.limit) {
    failure_ = HeapFailure::limit;
    return false;
  }
  const std::uint64_t needed_end = last;
  if (options_.growth_factor > 1.0) {
    const double step = static_cast<double>(mapped + missing) * options_.growth_factor;
    // Near the limit, the next step would be cut short anyway: take the rest of the budget now, so that a job
    // working close to its limit does not map again in later steps.
    const auto target = step * options_.growth_factor >= static_cast<double>(options_.limit)
                            ? options_.limit
                            : static_cast<std::uint64_t>(step);
    const std::uint64_t room = granules_.end_inside(block.addr, block.size);  // stay inside this free block
    std::uint64_t ahead = (target - (mapped + missing)) / granule;
    while (ahead > 0 && last < room) {
      if (!granules_.is_mapped(last)) --ahead;
      ++last;
    }
  }
  // Growth only: off the hot path. A backing may refuse the extra while it has room for the request (a GPU share
  // whose cap or the others' use leaves less than the limit): then only what the request needs.
  if (map_exactly(first, last)) return true;
  return last != needed_end && map_exactly(first, needed_end);
}

// Maps exactly the unmapped granules in [first, last), all or nothing (sets failure_ when the backing refuses).
// Allocates nothing (it runs inside try_allocate, which is noexcept, after the backing acted): the granule map is
// only marked once every run is mapped, so until then it still names the runs this call mapped, and a refusal
// unmaps exactly those (the walks see the map unchanged).
bool Heap::map_exactly(std::uint64_t first, std::uint64_t last) {
  constexpr std::uint64_t kNoGranule = ~std::uint64_t{0};
  std::uint64_t refused = kNoGranule;
  bool host_memory = false;
  granules_.for_each_run(first, last, false, [&](std::uint64_t f, std::uint64_t n) {
    if (refused != kNoGranule) return;
    try {
      if (!backing_.map(granules_.address_of(f), n * granules_.granule())) refused = f;
    } catch (const std::bad_alloc&) {  // the backing's own books, before it acted (backing.hpp): nothing mapped
      refused = f;
      host_memory = true;
    }
  });
  if (refused != kNoGranule) {
    granules_.for_each_run(first, refused, false, [&](std::uint64_t f, std::uint64_t n) {
      backing_.unmap(granules_.address_of(f), n * granules_.granule());
      ++counters_.maps;
      ++counters_.unmaps;
    });
    failure_ = host_memory ? HeapFailure::host_memory : HeapFailure::device;
    return false;
  }
  granules_.for_each_run(first, last, false, [&](std::uint64_t f, std::uint64_t n) {
    granules_.set(f, n, true);
    ++counters_.maps;
  });
  counters_.peak_mapped = std::max(counters_.peak_mapped, granules_.mapped_bytes());
  return true;
}

void Heap::unmap_range(std::uint64_t first, std::uint64_t count) {
  backing_.unmap(granules_.address_of(first), count * granules_.granule());
  granules_.set(first, count, false);
  ++counters_.unmaps;
}

std::uint64_t Heap::release_cached() {
  if (options_.preallocate) return 0;  // the budget is held for the process's life, by design
  const std::uint64_t before = granules_.mapped_bytes();
  large_bins_.for_each(blocks_, [&](BlockIndex index) {
    const Block& block = blocks_[index];
    const std::uint64_t first = granules_.first_inside(block.addr);
    const std::uint64_t last = granules_.end_inside(block.addr, block.size);
    if (first < last)
      granules_.for_each_run(first, last, true, [&](std::uint64_t f, std::uint64_t n) { unmap_range(f, n); });
  });
  mapped_after_release_ = granules_.mapped_bytes();
  return before - mapped_after_release_;
}

std::uint64_t Heap::largest_free_mapped() const {
  std::uint64_t largest = 0;
  small_bins_.for_each(blocks_, [&](BlockIndex index) { largest = std::max(largest, blocks_[index].size); });
  large_bins_.for_each(blocks_, [&](BlockIndex index) {
    const Block& block = blocks_[index];
    const std::uint64_t end = block.addr + block.size;
    const std::uint64_t first = granules_.first_covering(block.addr);
    granules_.for_each_run(first, granules_.end_covering(block.addr, block.size), true,
                           [&](std::uint64_t f, std::uint64_t n) {
                             std::uint64_t lo = std::max(block.addr, granules_.address_of(f));
                             std::uint64_t hi = std::min(end, granules_.address_of(f + n));
                             largest = std::max(largest, hi - lo);
                           });
  });
  return largest;
}

}  // namespace plimsoll::engine
