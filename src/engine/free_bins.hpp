#pragma once
// Free blocks of one size class, in two-level segregated bins (TLSF): the first level is the power of two
// of the size, the second splits each power of two into 32 bins, so one bin's sizes differ by at most ~3%.
// Two bitmaps find the first non-empty bin at or above a size in O(1).
//
// Invariants: bit (fl, sl) is set in the bitmaps iff heads_[fl][sl] != kNoBlock; every block in a bin's
// list is free and of that class, and its size maps to that bin.
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>

#include "engine/block.hpp"

namespace plimsoll::engine {

class FreeBins {
 public:
  static constexpr unsigned kQuantumShift = 8;  // sizes are multiples of 256 bytes
  static constexpr unsigned kSubBits = 5;
  static constexpr std::size_t kSubCount = 1u << kSubBits;
  static constexpr std::size_t kLevels = 64 - kQuantumShift - kSubBits + 1;
  // A bin holding many same-sized blocks is scanned at most this far for the best fit.
  static constexpr unsigned kScanLimit = 16;

  FreeBins() { for (auto& level : heads_) level.fill(kNoBlock); }

  void insert(BlockPool& pool, BlockIndex index) {
    Block& block = pool[index];
    auto [fl, sl] = bin_of(block.size);
    BlockIndex head = heads_[fl][sl];
    block.free_prev = kNoBlock;
    block.free_next = head;
    if (head != kNoBlock) pool[head].free_prev = index;
    heads_[fl][sl] = index;
    level_bits_ |= 1ull << fl;
    bin_bits_[fl] |= 1u << sl;
    free_bytes_ += block.size;
  }

  void remove(BlockPool& pool, BlockIndex index) {
    Block& block = pool[index];
    auto [fl, sl] = bin_of(block.size);
    if (block.free_prev != kNoBlock) pool[block.free_prev].free_next = block.free_next;
    else heads_[fl][sl] = block.free_next;
    if (block.free_next != kNoBlock) pool[block.free_next].free_prev = block.free_prev;
    if (heads_[fl][sl] == kNoBlock) {
      bin_bits_[fl] &= ~(1u << sl);
      if (bin_bits_[fl] == 0) level_bits_ &= ~(1ull << fl);
    }
    free_bytes_ -= block.size;
  }

  // The smallest free block of at least `size` bytes (lowest address among equals), searching the bin
  // that holds `size` and then the first non-empty bin above it. kNoBlock when none is large enough.
  BlockIndex find(const BlockPool& pool, std::uint64_t size) const {
    auto [fl, sl] = bin_of(size);
    BlockIndex best = best_in(pool, heads_[fl][sl], size);
    if (best != kNoBlock) return best;
    std::uint32_t above = (sl + 1 < kSubCount) ? bin_bits_[fl] & (~0u << (sl + 1)) : 0;
    if (above == 0) {
      std::uint64_t levels = (fl + 1 < 64) ? level_bits_ & (~0ull << (fl + 1)) : 0;
      if (levels == 0) return kNoBlock;
      fl = static_cast<std::size_t>(std::countr_zero(levels));
      above = bin_bits_[fl];
    }
    sl = static_cast<std::size_t>(std::countr_zero(above));
    return best_in(pool, heads_[fl][sl], size);
  }

  // Largest free block size (its bin's lower bound is exact enough for the search; this scans the top bin).
  std::uint64_t largest(const BlockPool& pool) const {
    if (level_bits_ == 0) return 0;
    auto fl = static_cast<std::size_t>(63 - std::countl_zero(level_bits_));
    auto sl = static_cast<std::size_t>(31 - std::countl_zero(bin_bits_[fl]));
    std::uint64_t size = 0;
    for (BlockIndex i = heads_[fl][sl]; i != kNoBlock; i = pool[i].free_next) size = std::max(size, pool[i].size);
    return size;
  }

  template <class Visit>
  void for_each(const BlockPool& pool, Visit&& visit) const {
    for (std::size_t fl = 0; fl < kLevels; ++fl)
      for (std::size_t sl = 0; sl < kSubCount; ++sl)
        for (BlockIndex i = heads_[fl][sl]; i != kNoBlock;) {
          BlockIndex next = pool[i].free_next;  // visit may remove i
          visit(i);
          i = next;
        }
  }

  std::uint64_t free_bytes() const { return free_bytes_; }

  struct Bin {
    std::size_t level, sub;
  };
  static Bin bin_of(std::uint64_t size) {
    std::uint64_t units = size >> kQuantumShift;
    if (units < kSubCount) return {0, units};
    auto top = static_cast<unsigned>(63 - std::countl_zero(units));
    return {top - kSubBits + 1, (units >> (top - kSubBits)) - kSubCount};
  }

 private:
  static BlockIndex best_in(const BlockPool& pool, BlockIndex head, std::uint64_t size) {
    BlockIndex best = kNoBlock;
    unsigned scanned = 0;
    for (BlockIndex i = head; i != kNoBlock && scanned < kScanLimit; i = pool[i].free_next, ++scanned) {
      const Block& block = pool[i];
      if (block.size < size) continue;
      if (best == kNoBlock || block.size < pool[best].size ||
          (block.size == pool[best].size && block.addr < pool[best].addr))
        best = i;
    }
    return best;
  }

  std::uint64_t level_bits_ = 0;
  std::array<std::uint32_t, kLevels> bin_bits_{};
  std::array<std::array<BlockIndex, kSubCount>, kLevels> heads_;
  std::uint64_t free_bytes_ = 0;
};

}  // namespace plimsoll::engine
