#include "engine/handed_table.hpp"

#include <sys/mman.h>

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
  // The first leaf becomes the hint (find_leaf): whoever claims the key publishes the leaf after it.
  std::uint64_t no_key = kNoKey;
  if (leaf != nullptr && hint_key_.compare_exchange_strong(no_key, addr >> kLeafShift, std::memory_order_relaxed))
    hint_leaf_.store(leaf, std::memory_order_release);
  return leaf;
}

}  // namespace plimsoll::engine
