#pragma once
// The per-thread caches over a bare heap, with a device lock of its own, as Allocator gives them one: the upstream the
// front's tests run against (tests/threads_front_test.cpp, tests/threads_front_counts_test.cpp).
#include <gtest/gtest.h>

#include <cstdint>
#include <span>

#include "engine/heap.hpp"
#include "engine/thread_cache.hpp"
#include "util/spin_lock.hpp"

namespace plimsoll::test_support {

class HeapUpstream : public engine::FrontUpstream {
 public:
  explicit HeapUpstream(engine::Heap& heap) : heap_(heap) {}
  std::size_t take_blocks(std::uint64_t size, std::size_t count, std::uint64_t* out) override {
    util::SpinGuard guard(lock_);
    ++takes_;
    std::size_t taken = 0;
    for (; taken < count; ++taken) {
      out[taken] = heap_.allocate(size, engine::kFrontTag);
      if (out[taken] == 0) break;
    }
    return taken;
  }
  void give_back(std::span<const std::uint64_t> addrs) override {
    util::SpinGuard guard(lock_);
    for (std::uint64_t addr : addrs) {
      engine::Heap::Freed freed;
      ASSERT_TRUE(heap_.deallocate(addr, freed)) << "the front gave back a block the heap does not hold";
      ASSERT_EQ(freed.tag, engine::kFrontTag);
    }
  }
  util::SpinLock& lock() { return lock_; }
  std::uint64_t takes() {
    util::SpinGuard guard(lock_);
    return takes_;
  }
  std::uint64_t live_blocks() {
    util::SpinGuard guard(lock_);
    return heap_.live_allocations();
  }
  std::uint64_t in_use() {
    util::SpinGuard guard(lock_);
    return heap_.counters().in_use;
  }

 private:
  std::uint64_t takes_ = 0;
  engine::Heap& heap_;
  util::SpinLock lock_;
};

}  // namespace plimsoll::test_support
