#pragma once
// Which granules of a reservation are backed by memory. The heap maps granules lazily as blocks first
// cover them and unmaps only whole granules lying inside free blocks, so reserved bytes track the live
// footprint rather than the peak of the address range.
#include <bit>
#include <cstdint>
#include <vector>

#include "util/bit_runs.hpp"

namespace plimsoll::engine {

class GranuleMap {
 public:
  GranuleMap() = default;
  GranuleMap(std::uint64_t base, std::uint64_t bytes, std::uint64_t granule)
      : base_(base), shift_(static_cast<unsigned>(std::countr_zero(granule))), words_((bytes / granule + 63) / 64, 0) {}

  std::uint64_t granule() const { return 1ull << shift_; }
  std::uint64_t mapped_bytes() const { return mapped_ << shift_; }

  // Granule indices [first, last) covering the byte range [addr, addr + size).
  std::uint64_t first_covering(std::uint64_t addr) const { return (addr - base_) >> shift_; }
  std::uint64_t end_covering(std::uint64_t addr, std::uint64_t size) const {
    return (addr + size - base_ + granule() - 1) >> shift_;
  }
  // Granule indices [first, last) lying wholly inside [addr, addr + size).
  std::uint64_t first_inside(std::uint64_t addr) const { return (addr - base_ + granule() - 1) >> shift_; }
  std::uint64_t end_inside(std::uint64_t addr, std::uint64_t size) const { return (addr + size - base_) >> shift_; }

  std::uint64_t address_of(std::uint64_t granule_index) const { return base_ + (granule_index << shift_); }
  bool is_mapped(std::uint64_t g) const { return (words_[g >> 6] >> (g & 63)) & 1; }

  // Counts unmapped granules in [first, last): a masked popcount of each word the range touches, since every
  // large allocation asks this of its range under the device lock (a bit at a time at both ends was a tenth of
  // the lock-held work on GPT's trace).
  std::uint64_t count_unmapped(std::uint64_t first, std::uint64_t last) const {
    if (first >= last) return 0;
    return (last - first) - util::count_set_bits(words_.data(), first, last);
  }

  // Whether every granule in [first, last) is mapped: the question a warm job's every large allocation asks of its
  // best fit. Masked compares, no popcount (without -mpopcnt, std::popcount is a call into libgcc).
  bool all_mapped(std::uint64_t first, std::uint64_t last) const {
    if (first >= last) return true;
    const std::uint64_t first_word = first >> 6, last_word = (last - 1) >> 6;
    const std::uint64_t low = ~0ull << (first & 63);
    const std::uint64_t high = ~0ull >> (63 - ((last - 1) & 63));
    if (first_word == last_word) return (words_[first_word] & low & high) == (low & high);
    if ((words_[first_word] & low) != low || (words_[last_word] & high) != high) return false;
    for (std::uint64_t w = first_word + 1; w < last_word; ++w)
      if (words_[w] != ~0ull) return false;
    return true;
  }

  // Calls run(first, count) for each maximal run of granules in [first, last) whose mapped state is
  // `mapped`, so the backing gets one call per run rather than one per granule (a word at a time: stats() walks
  // the whole reservation).
  template <class Run>
  void for_each_run(std::uint64_t first, std::uint64_t last, bool mapped, Run&& run) const {
    util::for_each_bit_run(words_.data(), first, last, mapped, run);
  }

  void set(std::uint64_t first, std::uint64_t count, bool mapped) {
    util::assign_bits(words_.data(), first, first + count, mapped);
    if (mapped) mapped_ += count;
    else mapped_ -= count;
  }

 private:
  std::uint64_t base_ = 0;
  unsigned shift_ = 21;
  std::vector<std::uint64_t> words_;
  std::uint64_t mapped_ = 0;
};

}  // namespace plimsoll::engine
