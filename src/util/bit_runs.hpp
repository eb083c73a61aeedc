#pragma once
// Walks over, and stores into, bitmaps of granules (bit i is bit i % 64 of word i / 64): the engine's GranuleMap and the backings'
// MappingLedger keep one bit per granule of reserved address space, and ask for runs and counts of it under a
// device's or a backing's lock, stats() included (IdleRelease calls it every 100 ms). A bit at a time that cost
// grew with the reserved space (3.5 ms at 1 TiB of host reservation); a word at a time skips the empty words and
// finds a run's ends with one count of trailing zeros each.
#include <bit>
#include <cstdint>

namespace plimsoll::util {

/// The first bit index in [from, last) whose bit equals `value`, or `last` when there is none.
inline std::uint64_t find_bit(const std::uint64_t* words, std::uint64_t from, std::uint64_t last, bool value) noexcept {
  while (from < last) {
    const std::uint64_t word = value ? words[from >> 6] : ~words[from >> 6];
    const std::uint64_t from_here = word & (~std::uint64_t{0} << (from & 63));
    if (from_here != 0) {
      const std::uint64_t at = (from & ~std::uint64_t{63}) + static_cast<std::uint64_t>(std::countr_zero(from_here));
      return at < last ? at : last;
    }
    from = (from | 63) + 1;  // the next word's first bit
  }
  return last;
}

/// Calls run(first, count) for each maximal run of bits equal to `value` in [first, last), in order.
template <class Run>
void for_each_bit_run(const std::uint64_t* words, std::uint64_t first, std::uint64_t last, bool value, Run&& run) {
  std::uint64_t at = find_bit(words, first, last, value);
  while (at < last) {
    const std::uint64_t end = find_bit(words, at, last, !value);
    run(at, end - at);
    at = find_bit(words, end, last, value);
  }
}

/// How many bits of [first, last) are set: a masked popcount of each word the range touches.
inline std::uint64_t count_set_bits(const std::uint64_t* words, std::uint64_t first, std::uint64_t last) noexcept {
  if (first >= last) return 0;
  const std::uint64_t first_word = first >> 6, last_word = (last - 1) >> 6;
  const std::uint64_t low = ~std::uint64_t{0} << (first & 63);               // the first word's bits from `first` up
  const std::uint64_t high = ~std::uint64_t{0} >> (63 - ((last - 1) & 63));  // the last word's bits to `last - 1`
  const auto ones = [](std::uint64_t bits) { return static_cast<std::uint64_t>(std::popcount(bits)); };
  if (first_word == last_word) return ones(words[first_word] & low & high);
  std::uint64_t set = ones(words[first_word] & low) + ones(words[last_word] & high);
  for (std::uint64_t w = first_word + 1; w < last_word; ++w) set += ones(words[w]);
  return set;
}

/// Sets (value true) or clears every bit of [first, last): masked stores on the end words, whole words between.
inline void assign_bits(std::uint64_t* words, std::uint64_t first, std::uint64_t last, bool value) noexcept {
  if (first >= last) return;
  const std::uint64_t first_word = first >> 6, last_word = (last - 1) >> 6;
  const std::uint64_t low = ~std::uint64_t{0} << (first & 63);
  const std::uint64_t high = ~std::uint64_t{0} >> (63 - ((last - 1) & 63));
  const auto assign = [value](std::uint64_t& word, std::uint64_t mask) { word = value ? word | mask : word & ~mask; };
  if (first_word == last_word) return assign(words[first_word], low & high);
  assign(words[first_word], low);
  for (std::uint64_t w = first_word + 1; w < last_word; ++w) words[w] = value ? ~std::uint64_t{0} : 0;
  assign(words[last_word], high);
}

}  // namespace plimsoll::util
