#pragma once
// Block records, kept outside the memory they describe: device memory cannot hold headers, and the
// simulated device has no memory at all.
#include <algorithm>
#include <cstdint>
#include <new>
#include <vector>

namespace plimsoll::engine {

using BlockIndex = std::uint32_t;
inline constexpr BlockIndex kNoBlock = UINT32_MAX;

// A block is a contiguous range of one span. Invariants (checked by tests/engine_heap_checker.hpp):
//  - the blocks of a span tile it exactly: prev/next link address-ordered neighbours, kNoBlock at the ends;
//  - two free neighbours never exist (freeing coalesces at once);
//  - a free block sits in exactly one bin of its class; a used block in none;
//  - addr and size are multiples of the heap's quantum (256 bytes), size > 0.
// One cache line each (64 bytes, aligned): at its natural 56 bytes a record straddled two lines in 6 of 8 slots, and
// the heap's warm path (best fit, split, coalesce, the bins' links) reads and writes several records an operation.
// GPT's replay measured 0.3-1.4 ns an operation faster with it (docs/engine.md, "Figures"); the pool's vector
// allocates over-aligned storage (C++17 aligned new), tests/engine_block_pool_test.cpp checks every record's line.
struct alignas(64) Block {
  std::uint64_t addr = 0;
  std::uint64_t size = 0;
  std::uint64_t requested = 0;  // bytes asked for (used blocks), for stats
  BlockIndex prev = kNoBlock;   // address-ordered neighbours within the span
  BlockIndex next = kNoBlock;
  BlockIndex free_prev = kNoBlock;  // links within its bin (free blocks only)
  BlockIndex free_next = kNoBlock;
  BlockIndex span_head = kNoBlock;  // page blocks: the first small block inside the page
  std::uint16_t tag = 0;
  bool free = true;
  bool small = false;  // belongs to the small-block class (lives inside a small page)
  bool page = false;   // a large block that holds a small page
};

// Block records by index; freed records are reused, so indices stay small and dense.
class BlockPool {
 public:
  BlockIndex make(const Block& block) {
    const BlockIndex index = take_record();
    blocks_[index] = block;
    return index;
  }
  // A free record, written field by field into the pool: a Block built on the stack and copied in is written with
  // narrow stores and read back with wide ones, which the CPU cannot forward (a stall on every split of the heap's
  // warm path).
  BlockIndex make_free(std::uint64_t addr, std::uint64_t size, BlockIndex prev, BlockIndex next, bool small) {
    const BlockIndex index = take_record();
    Block& block = blocks_[index];
    block.addr = addr;
    block.size = size;
    block.requested = 0;
    block.prev = prev;
    block.next = next;
    block.free_prev = kNoBlock;
    block.free_next = kNoBlock;
    block.span_head = kNoBlock;
    block.tag = 0;
    block.free = true;
    block.small = small;
    block.page = false;
    return index;
  }
  // Never allocates: vacant_'s capacity covers every record (invariant below).
  void drop(BlockIndex index) {
    vacant_.push_back(index);
    ++spare_;
  }
  /// Whether `count` records can be made without allocating (and every record dropped): makes room when not. False,
  /// with nothing changed, when host memory is out. The heap asks before an allocation changes anything, since it
  /// runs inside the allocator's noexcept try_allocate under the device lock.
  bool ready(std::size_t count) noexcept {
    if (spare_ >= count) [[likely]] return true;
    return try_grow(count);
  }
  Block& operator[](BlockIndex index) { return blocks_[index]; }
  const Block& operator[](BlockIndex index) const { return blocks_[index]; }
  std::size_t records() const { return blocks_.size() - vacant_.size(); }

 private:
  // Out of line and cold: the allocation path keeps only the compare.
  [[gnu::noinline, gnu::cold]] bool try_grow(std::size_t count) noexcept {
    try {
      grow(count);
    } catch (const std::bad_alloc&) {
      return false;
    }
    return true;
  }
  // Room for `count` more records; vacant_ first, so a failure leaves blocks_ as it was.
  [[gnu::noinline, gnu::cold]] void grow(std::size_t count) {
    const std::size_t want = std::max(blocks_.capacity() * 2, blocks_.size() + count);
    vacant_.reserve(want);
    blocks_.reserve(want);
    spare_ = vacant_.size() + (blocks_.capacity() - blocks_.size());
  }

  // A record for make()/make_free() to fill: a dropped one, else a new one at the end.
  BlockIndex take_record() {
    BlockIndex index;
    if (!vacant_.empty()) [[likely]] {
      index = vacant_.back();
      vacant_.pop_back();
    } else {
      index = append_record();
    }
    --spare_;
    return index;
  }
  // Out of line: the heap's flattened hot paths would otherwise inline a vector's reallocation. No Block argument:
  // a temporary would be built on every caller's stack.
  [[gnu::noinline]] BlockIndex append_record() {
    if (blocks_.size() == blocks_.capacity()) [[unlikely]] grow(1);  // a make() no ready() prepared: may throw
    blocks_.emplace_back();
    return static_cast<BlockIndex>(blocks_.size() - 1);
  }

  // Invariants: vacant_.capacity() >= blocks_.capacity() (so drop() never allocates); spare_ == vacant_.size() +
  // blocks_.capacity() - blocks_.size(), the records make() hands out without allocating (one compare for ready()).
  std::vector<Block> blocks_;
  std::vector<BlockIndex> vacant_;
  std::size_t spare_ = 0;
};

}  // namespace plimsoll::engine
