#pragma once
// Address -> block index for live allocations: open addressing, linear probing, backward-shift deletion
// (no tombstones, so lookups stay short however long the process runs). Load factor <= 1/2.
#include <bit>
#include <cstdint>
#include <new>
#include <vector>

#include "engine/block.hpp"

namespace plimsoll::engine {

class AddressMap {
 public:
  AddressMap() { slots_.resize(kInitialSlots); }

  BlockIndex find(std::uint64_t addr) const {
    for (std::size_t i = home(addr);; i = (i + 1) & mask()) {
      const Slot& slot = slots_[i];
      if (slot.addr == addr) return slot.block;
      if (slot.addr == 0) return kNoBlock;
    }
  }

  // Whether one insert() can be done without allocating: grows when not. False, with nothing changed, when host
  // memory is out (grow() makes the new table before it touches the old one). Asked before the heap changes
  // anything, inside the allocator's noexcept try_allocate.
  bool ready_for_one() noexcept {
    if ((count_ + 1) * 2 <= slots_.size()) [[likely]] return true;
    return try_grow();
  }
  // addr must be non-zero and not present.
  void insert(std::uint64_t addr, BlockIndex block) {
    if ((count_ + 1) * 2 > slots_.size()) grow();
    place(addr, block);
    ++count_;
  }

  // Returns the block that was mapped, or kNoBlock when addr was not present.
  BlockIndex erase(std::uint64_t addr) {
    const std::size_t slot = slot_of(addr);
    if (slot == kNoSlot) return kNoBlock;
    const BlockIndex erased = slots_[slot].block;
    erase_slot(slot);
    return erased;
  }

  // Find, then erase, in one probe: the caller looks at the block before deciding to erase it.
  static constexpr std::size_t kNoSlot = ~std::size_t{0};
  std::size_t slot_of(std::uint64_t addr) const {
    for (std::size_t i = home(addr);; i = (i + 1) & mask()) {
      if (slots_[i].addr == addr) return i;
      if (slots_[i].addr == 0) return kNoSlot;
    }
  }
  BlockIndex block_at(std::size_t slot) const { return slots_[slot].block; }
  // slot must come from slot_of() with no insert or erase since.
  void erase_slot(std::size_t slot) {
    std::size_t i = slot;
    // Shift later members of the probe run back, so no lookup ever stops early at the hole.
    for (std::size_t j = (i + 1) & mask(); slots_[j].addr != 0; j = (j + 1) & mask()) {
      std::size_t want = home(slots_[j].addr);
      bool can_move = (i <= j) ? (want <= i || want > j) : (want <= i && want > j);
      if (can_move) {
        slots_[i] = slots_[j];
        i = j;
      }
    }
    slots_[i] = Slot{};
    --count_;
  }

  std::size_t size() const { return count_; }

  template <class Visit>
  void for_each(Visit&& visit) const {
    for (const Slot& slot : slots_)
      if (slot.addr != 0) visit(slot.addr, slot.block);
  }

 private:
  struct Slot {
    std::uint64_t addr = 0;
    BlockIndex block = kNoBlock;
  };
  static constexpr std::size_t kInitialSlots = 1024;

  std::size_t mask() const { return slots_.size() - 1; }
  std::size_t home(std::uint64_t addr) const {
    // Addresses are multiples of 256: drop those bits, then a Fibonacci hash spreads the rest.
    std::uint64_t h = (addr >> 8) * 0x9E3779B97F4A7C15ull;
    return static_cast<std::size_t>(h >> (64 - std::countr_zero(slots_.size())));
  }
  void place(std::uint64_t addr, BlockIndex block) {
    std::size_t i = home(addr);
    while (slots_[i].addr != 0) i = (i + 1) & mask();
    slots_[i] = Slot{addr, block};
  }
  [[gnu::noinline, gnu::cold]] bool try_grow() noexcept {
    try {
      grow();
    } catch (const std::bad_alloc&) {
      return false;
    }
    return true;
  }
  [[gnu::noinline]] void grow() {  // rare: kept out of the heap's flattened hot paths
    std::vector<Slot> old(slots_.size() * 2);
    old.swap(slots_);
    for (const Slot& slot : old)
      if (slot.addr != 0) place(slot.addr, slot.block);
  }

  std::vector<Slot> slots_;
  std::size_t count_ = 0;
};

}  // namespace plimsoll::engine
