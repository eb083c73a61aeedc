#pragma once
// Which blocks the per-thread caches handed out, by address, readable and writable by any thread without a lock
// (docs/engine.md, "Threads"). A radix table like tcmalloc's page map: one 64-bit word per 256-byte quantum of
// address space, in leaves of 1 GiB of addresses (32 MiB of words, mapped lazily by the kernel: only the pages
// holding words of handed-out blocks are ever touched), under a middle level of 2^18 leaves and a top of 2^9
// middles: 57 bits of address, which covers host pointers and the simulated devices' addresses.
//
// A word is written only by the thread that owns the block at that moment: the allocating thread sets it (the block
// came out of its own cache), the freeing thread clears it. Relaxed atomics: the block's handover between threads
// is the program's (it passed the pointer), and the word needs no more ordering than the pointer had. Two threads
// freeing the same block at the same moment race in the program; that double free may go unseen (a sequential
// one, from any threads, is always caught: the second free finds the word clear).
//
// Beside each leaf, one *region* bit per 64 KiB of addresses (2 KiB per leaf, so the bits of a job's working set
// stay in cache) says a handed-out block ever started there. set() marks the region before it writes the word, and
// bits are never cleared, so a word can be set only in a marked region, and get() of an address in an unmarked
// region answers 0 without reading the word: a free of a large heap block (which no cache ever serves) then costs a
// read of a hot summary line instead of a cold word (docs/engine.md, "Threads").
#include <array>
#include <atomic>
#include <cstdint>

namespace plimsoll::engine {

class HandedTable {
 public:
  static constexpr int kQuantumShift = 8;  // ThreadCaches::kQuantum: blocks start on 256-byte boundaries
  static constexpr int kLeafShift = 30;
  static constexpr int kMiddleShift = 48;
  static constexpr int kAddressBits = 57;
  static constexpr int kRegionShift = 16;  // one summary bit per 64 KiB (ThreadCaches::kMaxSize)

  /// A handed-out block's word: its requested bytes and tag, and a bit that says it is handed out.
  static constexpr std::uint64_t word(std::uint64_t requested, std::uint16_t tag) {
    return kHanded | (std::uint64_t{tag} << 32) | requested;
  }
  static constexpr bool handed(std::uint64_t w) { return (w & kHanded) != 0; }
  static constexpr std::uint64_t requested(std::uint64_t w) { return w & 0xFFFFFFFFull; }
  static constexpr std::uint16_t tag(std::uint64_t w) { return static_cast<std::uint16_t>(w >> 32); }

  HandedTable() = default;
  ~HandedTable();
  HandedTable(const HandedTable&) = delete;
  HandedTable& operator=(const HandedTable&) = delete;

  /// Whether addr can have a word (a quantum boundary within 57 bits).
  static bool addressable(std::uint64_t addr) { return (addr & kQuantumMask) == 0 && (addr >> kAddressBits) == 0; }

  /// The word of addr; 0 when addr is not handed out (or not addressable).
  std::uint64_t get(std::uint64_t addr) const {
    if (!addressable(addr)) return 0;
    const std::uint64_t* leaf = find_leaf(addr);
    if (leaf == nullptr) return 0;
    const std::uint64_t regions =
        std::atomic_ref<const std::uint64_t>(leaf[kLeafWords + region_word(addr)]).load(std::memory_order_relaxed);
    if ((regions & region_bit(addr)) == 0) return 0;  // no front block ever started near addr: no cold word read
    return std::atomic_ref<const std::uint64_t>(leaf[slot(addr)]).load(std::memory_order_relaxed);
  }
  /// Whether addr's region is marked (for tests).
  bool marked(std::uint64_t addr) const {
    const std::uint64_t* leaf = addressable(addr) ? find_leaf(addr) : nullptr;
    return leaf != nullptr && (std::atomic_ref<const std::uint64_t>(leaf[kLeafWords + region_word(addr)])
                                   .load(std::memory_order_relaxed) &
                               region_bit(addr)) != 0;
  }
  /// Sets addr's word, marking its region first when it is not (a load of a hot summary word, so every path that
  /// hands a block out keeps the invariant by itself); false when no leaf could be made (the caller declines).
  bool set(std::uint64_t addr, std::uint64_t w) {
    std::uint64_t* leaf = addressable(addr) ? leaf_for(addr) : nullptr;
    if (leaf == nullptr) return false;
    mark_in(leaf, addr);
    std::atomic_ref<std::uint64_t>(leaf[slot(addr)]).store(w, std::memory_order_relaxed);
    return true;
  }
  /// Clears the word of an addr get() found set.
  void clear(std::uint64_t addr) {
    std::atomic_ref<std::uint64_t>(find_leaf(addr)[slot(addr)]).store(0, std::memory_order_relaxed);
  }

 private:
  static constexpr std::uint64_t kHanded = 1ull << 63;
  static constexpr std::uint64_t kQuantumMask = (1ull << kQuantumShift) - 1;
  static constexpr std::size_t kLeafWords = std::size_t{1} << (kLeafShift - kQuantumShift);
  // The region bits follow a leaf's words in the same mapping.
  static constexpr std::size_t kRegionWords = std::size_t{1} << (kLeafShift - kRegionShift - 6);
  static constexpr std::size_t kMiddleLeaves = std::size_t{1} << (kMiddleShift - kLeafShift);
  static constexpr std::size_t kTopMiddles = std::size_t{1} << (kAddressBits - kMiddleShift);
  using Leaf = std::uint64_t;
  using Middle = std::atomic<Leaf*>;

  static std::size_t slot(std::uint64_t addr) { return (addr >> kQuantumShift) & (kLeafWords - 1); }
  static std::size_t leaf_index(std::uint64_t addr) { return (addr >> kLeafShift) & (kMiddleLeaves - 1); }
  static void mark_in(std::uint64_t* leaf, std::uint64_t addr) {
    std::atomic_ref<std::uint64_t> regions(leaf[kLeafWords + region_word(addr)]);
    if ((regions.load(std::memory_order_relaxed) & region_bit(addr)) == 0) [[unlikely]]
      regions.fetch_or(region_bit(addr), std::memory_order_relaxed);  // threads mark one word from their own blocks
  }
  static std::size_t region_word(std::uint64_t addr) { return (addr >> (kRegionShift + 6)) & (kRegionWords - 1); }
  static std::uint64_t region_bit(std::uint64_t addr) { return std::uint64_t{1} << ((addr >> kRegionShift) & 63); }

  const std::uint64_t* find_leaf(std::uint64_t addr) const {
    const Middle* middle = top_[addr >> kMiddleShift].load(std::memory_order_acquire);
    return middle != nullptr ? middle[leaf_index(addr)].load(std::memory_order_acquire) : nullptr;
  }
  std::uint64_t* find_leaf(std::uint64_t addr) {
    Middle* middle = top_[addr >> kMiddleShift].load(std::memory_order_acquire);
    return middle != nullptr ? middle[leaf_index(addr)].load(std::memory_order_acquire) : nullptr;
  }
  /// The leaf of addr, made when missing (rare: once per GiB of address space the caches ever use).
  std::uint64_t* leaf_for(std::uint64_t addr) {
    if (std::uint64_t* leaf = find_leaf(addr)) [[likely]] return leaf;
    return make_leaf(addr);
  }
  std::uint64_t* make_leaf(std::uint64_t addr);

  std::array<std::atomic<Middle*>, kTopMiddles> top_{};
};

}  // namespace plimsoll::engine
