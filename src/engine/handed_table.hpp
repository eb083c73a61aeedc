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
// Beside each leaf, one *region* byte per 64 KiB of addresses (16 KiB per leaf, so the marks of a job's working set
// stay in cache) says a handed-out block ever started there. set() marks the region before it writes the word, and
// marks are never cleared, so a word can be set only in a marked region, and get() of an address in an unmarked region
// answers 0 without reading the word: a free of a large heap block (which no cache ever serves) then costs a read of
// a hot summary line instead of a cold word (docs/engine.md, "Threads"). A byte, not a bit: every free reads it, and
// a byte is found with a shift and a mask where a bit in a word took a second shift, a multiply by two and a shift
// of a one (8 instructions a free of the ~50 before the front; docs/engine.md, "Threads", the speed stop).
//
// A *wide* block (requested bytes over 64 KiB: the caches' big blocks) has its word elsewhere: one word per 64 KiB
// region, with the block's offset in the region, and a second mark in the region's byte beside the plain one (one
// load reads both). At most one wide block starts in a region (two would overlap), so its word is exact; and the words of
// blocks up to 1 MiB, spread over a heap, sit in a few dense pages (one per 32 MiB of addresses) instead of one
// scattered page each, which cost a page fault the first time and a TLB miss every time, and marked the small
// regions that a heap free must then read a word of.
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
  static constexpr int kRegionShift = 16;  // one byte of marks per 64 KiB (ThreadCaches::kMaxBinned)

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

  /// Whether a block of `requested` bytes keeps its word in its region's wide word.
  static constexpr bool wide(std::uint64_t requested) { return requested > (std::uint64_t{1} << kRegionShift); }

  /// The word of addr; 0 when addr is not handed out (or not addressable).
  std::uint64_t get(std::uint64_t addr) const {
    if (!addressable(addr)) return 0;
    return in_leaf(find_leaf(addr), addr);
  }
  /// The word of an addressable addr in its leaf (null: none made, so nothing is handed out there).
  static std::uint64_t in_leaf(const std::uint64_t* leaf, std::uint64_t addr) {
    if (leaf == nullptr) return 0;
    const std::uint8_t marks = marks_of(leaf, addr);
    if ((marks & kPlainMark) != 0) {
      const std::uint64_t w = std::atomic_ref<const std::uint64_t>(leaf[slot(addr)]).load(std::memory_order_relaxed);
      if (handed(w)) return w;
    }
    // No front block ever started near addr: no cold word read.
    if ((marks & kWideMark) == 0) return 0;
    const std::uint64_t w =
        std::atomic_ref<const std::uint64_t>(leaf[kWideWords + region(addr)]).load(std::memory_order_relaxed);
    return handed(w) && offset_of(w) == offset(addr) ? w & ~kOffsetMask : 0;
  }
  /// Whether addr's region is marked (for tests).
  bool marked(std::uint64_t addr) const {
    const std::uint64_t* leaf = addressable(addr) ? find_leaf(addr) : nullptr;
    return leaf != nullptr && (marks_of(leaf, addr) & kPlainMark) != 0;
  }
  /// Sets addr's word, marking its region first when it is not (a load of its hot byte of marks, so every path that
  /// hands a block out keeps the invariant by itself); false when no leaf could be made (the caller declines).
  bool set(std::uint64_t addr, std::uint64_t w) {
    std::uint64_t* leaf = prepared(addr, wide(requested(w)));
    if (leaf == nullptr) return false;
    set_prepared(leaf, addr, w);  // in the leaf prepared() made or found: no second walk
    return true;
  }
  /// Makes ready for set_prepared a block starting at addr, before it is ever handed out: its leaf made and its
  /// region marked (plain, or `wide` for a block over 64 KiB). False when no leaf could be made. The caches call it
  /// once per block, when the block enters the front from the heap, so a cache hit writes its word with no region
  /// read (docs/engine.md, "Threads": marks never clear, so a block prepared once stays prepared).
  bool prepare(std::uint64_t addr, bool is_wide) { return prepared(addr, is_wide) != nullptr; }
  /// prepare(), answering with the block's leaf (nullptr when none could be made).
  std::uint64_t* prepared(std::uint64_t addr, bool is_wide) {
    std::uint64_t* leaf = addressable(addr) ? leaf_for(addr) : nullptr;
    if (leaf != nullptr) mark_in(leaf, is_wide ? kWideMark : kPlainMark, addr);
    return leaf;
  }
  /// The leaf of an addr prepare(addr, is_wide) said yes to (never null then). The contract is checked where
  /// assertions are on (builds without NDEBUG: the sanitizer builds): an address never prepared, or prepared for the
  /// other kind of word (a plain word in a region marked only wide is one `get` and `find` never read), aborts with a
  /// message, rather than a store through a null leaf or a word set where a heap free would never read it.
  std::uint64_t* prepared_leaf(std::uint64_t addr, bool is_wide) {
    std::uint64_t* leaf = find_leaf(addr);
#ifndef NDEBUG
    if (leaf == nullptr || (marks_of(leaf, addr) & (is_wide ? kWideMark : kPlainMark)) == 0) [[unlikely]]
      unprepared(addr);
#else
    static_cast<void>(is_wide);
#endif
    return leaf;
  }
  /// Sets the word of an addr prepare() said yes to, in its leaf (prepared_leaf): one store, no region read.
  static void set_prepared(std::uint64_t* leaf, std::uint64_t addr, std::uint64_t w) {
    if (wide(requested(w))) {
      std::atomic_ref<std::uint64_t>(leaf[kWideWords + region(addr)]).store(w | offset(addr) << kOffsetShift,
                                                                            std::memory_order_relaxed);
      return;
    }
    std::atomic_ref<std::uint64_t>(leaf[slot(addr)]).store(w, std::memory_order_relaxed);
  }
  /// set_prepared for a block of at most 64 KiB (not wide), which the caller knows: no test of the size.
  static void set_prepared_plain(std::uint64_t* leaf, std::uint64_t addr, std::uint64_t w) {
    std::atomic_ref<std::uint64_t>(leaf[slot(addr)]).store(w, std::memory_order_relaxed);
  }
  /// A lookup that keeps its leaf, so the free that follows clears the word without walking the radix again.
  struct Found {
    std::uint64_t* leaf = nullptr;
    std::uint64_t word = 0;
  };
  Found find(std::uint64_t addr) {
    if (!addressable(addr)) return {};
    std::uint64_t* leaf = find_leaf(addr);
    return {leaf, in_leaf(leaf, addr)};
  }
  /// Clears the word `w` of an addr get() found set.
  void clear(std::uint64_t addr, std::uint64_t w) { clear_in(find_leaf(addr), addr, w); }
  /// clear_in for a block of at most 64 KiB (not wide), which the caller knows: no test of the size.
  static void clear_plain_in(std::uint64_t* leaf, std::uint64_t addr) {
    std::atomic_ref<std::uint64_t>(leaf[slot(addr)]).store(0, std::memory_order_relaxed);
  }
  /// The same, in the leaf find() returned with it.
  static void clear_in(std::uint64_t* leaf, std::uint64_t addr, std::uint64_t w) {
    std::atomic_ref<std::uint64_t>(wide(requested(w)) ? leaf[kWideWords + region(addr)] : leaf[slot(addr)])
        .store(0, std::memory_order_relaxed);
  }

 private:
  static constexpr std::uint64_t kHanded = 1ull << 63;
  static constexpr std::uint64_t kQuantumMask = (1ull << kQuantumShift) - 1;
  static constexpr std::size_t kLeafWords = std::size_t{1} << (kLeafShift - kQuantumShift);
  // The region bytes follow a leaf's words in the same mapping, one a region (the words that hold them: 8 a word).
  // Two marks a region, in one byte, so a lookup reads one: a plain block started there, a wide block started there.
  static constexpr std::size_t kRegionWords = (std::size_t{1} << (kLeafShift - kRegionShift)) / 8;
  static constexpr std::uint8_t kPlainMark = 1, kWideMark = 2;
  // Then the wide blocks' words, one per region.
  static constexpr std::size_t kWideWords = kLeafWords + kRegionWords;
  static constexpr std::size_t kLeafSize = kWideWords + (std::size_t{1} << (kLeafShift - kRegionShift));
  // A wide word keeps its block's offset in the region, in quanta, in bits the plain words leave clear.
  static constexpr int kOffsetShift = 48;
  static constexpr std::uint64_t kOffsetMask = 0xFFull << kOffsetShift;
  static_assert(kRegionShift - kQuantumShift == 8, "a region's offsets, in quanta, fit 8 bits");
  static constexpr std::size_t kMiddleLeaves = std::size_t{1} << (kMiddleShift - kLeafShift);
  static constexpr std::size_t kTopMiddles = std::size_t{1} << (kAddressBits - kMiddleShift);
  using Leaf = std::uint64_t;
  using Middle = std::atomic<Leaf*>;

  static std::size_t slot(std::uint64_t addr) { return (addr >> kQuantumShift) & (kLeafWords - 1); }
  static std::size_t leaf_index(std::uint64_t addr) { return (addr >> kLeafShift) & (kMiddleLeaves - 1); }
  static std::size_t region(std::uint64_t addr) {
    return (addr >> kRegionShift) & ((std::size_t{1} << (kLeafShift - kRegionShift)) - 1);
  }
  static std::uint64_t offset(std::uint64_t addr) { return (addr >> kQuantumShift) & 0xFF; }
  static std::uint64_t offset_of(std::uint64_t w) { return (w & kOffsetMask) >> kOffsetShift; }
  /// The byte of addr's region marks, after the leaf's words (the mapping's bytes: unsigned char may alias them).
  static std::uint8_t* marks_at(std::uint64_t* leaf, std::uint64_t addr) {
    return reinterpret_cast<std::uint8_t*>(leaf + kLeafWords) + region(addr);
  }
  static std::uint8_t marks_of(const std::uint64_t* leaf, std::uint64_t addr) {
    const auto* marks = reinterpret_cast<const std::uint8_t*>(leaf + kLeafWords) + region(addr);
    return std::atomic_ref<const std::uint8_t>(*marks).load(std::memory_order_relaxed);
  }
  static void mark_in(std::uint64_t* leaf, std::uint8_t mark, std::uint64_t addr) {
    std::atomic_ref<std::uint8_t> marks(*marks_at(leaf, addr));
    if ((marks.load(std::memory_order_relaxed) & mark) == 0) [[unlikely]]
      marks.fetch_or(mark, std::memory_order_relaxed);  // threads mark one byte from their own blocks
  }

  // The leaves last made are also kept in a small direct-mapped array, each entry one word (the leaf's page number
  // above its key plus one, addr >> kLeafShift plus one, so a zero entry matches no key), read before the radix walk: the entry loads as soon as addr is known and a
  // hit needs no second load, so the word's store or load waits on one load and a compare instead of two more
  // dependent loads (docs/engine.md, "Threads"). An entry is written when a leaf is made (a later leaf of the same
  // slot replaces it: that key walks again); a leaf whose entry would not fit is found by the walk alone.
  std::uint64_t* find_leaf(std::uint64_t addr) const {
    const std::uint64_t key = addr >> kLeafShift;
    const std::uint64_t entry = recent_[key & (kRecent - 1)].load(std::memory_order_acquire);
    if ((entry & kKeyMask) == key + 1) [[likely]] return reinterpret_cast<std::uint64_t*>((entry >> kKeyBits) << 12);
    Middle* middle = top_[addr >> kMiddleShift].load(std::memory_order_acquire);
    return middle != nullptr ? middle[leaf_index(addr)].load(std::memory_order_acquire) : nullptr;
  }
  /// The leaf of addr, made when missing (rare: once per GiB of address space the caches ever use).
  std::uint64_t* leaf_for(std::uint64_t addr) {
    if (std::uint64_t* leaf = find_leaf(addr)) [[likely]] return leaf;
    return make_leaf(addr);
  }
  std::uint64_t* make_leaf(std::uint64_t addr);
  [[noreturn, gnu::cold]] static void unprepared(std::uint64_t addr);

  static constexpr int kKeyBits = kAddressBits - kLeafShift;
  static constexpr std::uint64_t kKeyMask = (std::uint64_t{1} << kKeyBits) - 1;
  static constexpr std::size_t kRecent = 16;
  alignas(64) std::array<std::atomic<std::uint64_t>, kRecent> recent_{};  // a line of its own: read on every hit
  std::array<std::atomic<Middle*>, kTopMiddles> top_{};
};

}  // namespace plimsoll::engine
