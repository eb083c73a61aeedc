#include "engine/handed_table.hpp"

#include <sys/mman.h>

#include <cstdio>
#include <cstdlib>

namespace plimsoll::engine {

namespace {

// Zeroed, lazily backed pages: a leaf costs address space, and memory only where words are written.
void* map_zeroed(std::size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

// Publishes a freshly mapped table level in `at` unless another thread did first; returns the one that won.
template <class T>
T* publish(std::atomic<T*>& at, std::size_t bytes) {
  T* current = at.load(std::memory_order_acquire);
  if (current != nullptr) return current;
  auto* made = static_cast<T*>(map_zeroed(bytes));
  if (made == nullptr) return nullptr;
  if (at.compare_exchange_strong(current, made, std::memory_order_acq_rel, std::memory_order_acquire)) return made;
  munmap(made, bytes);
  return current;
}

}  // namespace

HandedTable::~HandedTable() {
  for (std::atomic<Middle*>& top : top_) {
    Middle* middle = top.load(std::memory_order_acquire);
    if (middle == nullptr) continue;
    for (std::size_t i = 0; i < kMiddleLeaves; ++i) {
      if (Leaf* leaf = middle[i].load(std::memory_order_acquire)) munmap(leaf, kLeafSize * sizeof(Leaf));
    }
    munmap(middle, kMiddleLeaves * sizeof(Middle));
  }
}

std::uint64_t* HandedTable::make_leaf(std::uint64_t addr) {
  // std::atomic<Leaf*> is a plain pointer in zeroed memory: all-zero bytes are a null pointer on every target here.
  static_assert(sizeof(Middle) == sizeof(Leaf*) && std::atomic<Leaf*>::is_always_lock_free);
  Middle* middle = publish(top_[addr >> kMiddleShift], kMiddleLeaves * sizeof(Middle));
  if (middle == nullptr) return nullptr;
  Leaf* leaf = publish(middle[leaf_index(addr)], kLeafSize * sizeof(Leaf));
  // Remembered in its slot (find_leaf) when its page number fits above the key plus one (user addresses below
  // 2^47, 4 KiB pages: 35 bits beside the key's 27).
  const auto bits = reinterpret_cast<std::uintptr_t>(leaf);
  static_assert(64 - kKeyBits >= 47 - 12, "a leaf's page number fits above its key");
  const std::uint64_t key = addr >> kLeafShift;
  if (leaf != nullptr && (bits & 0xFFF) == 0 && (bits >> 47) == 0 && key + 1 <= kKeyMask) {
    recent_[key & (kRecent - 1)].store((std::uint64_t{bits} >> 12) << kKeyBits | (key + 1), std::memory_order_release);
  }
  return leaf;
}

void HandedTable::unprepared(std::uint64_t addr) {
  std::fprintf(stderr,
               "plimsoll: internal error: the handed-out table was asked for the leaf of 0x%llx, which was never "
               "prepared (HandedTable::prepare when the block entered the front); please report it\n",
               static_cast<unsigned long long>(addr));
  std::abort();
}

}  // namespace plimsoll::engine
