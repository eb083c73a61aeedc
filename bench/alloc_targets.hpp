#pragma once
// The allocators a benchmark compares, behind one tiny interface so the replay loop calls each directly
// (a template parameter, not a virtual call: the call itself is part of what is measured).
#include <cstddef>
#include <cstdlib>
#include <new>

#include "plimsoll/allocator.hpp"

namespace plimsoll::bench {

/// The C library's allocator as PyTorch's CPU allocator calls it: posix_memalign(64) and free. jemalloc and
/// mimalloc are measured through this same code, preloaded with LD_PRELOAD.
struct MallocTarget {
  static constexpr std::size_t kAlignment = 64;

  void* allocate(std::size_t bytes) {
    void* ptr = nullptr;
    if (posix_memalign(&ptr, kAlignment, bytes) != 0) throw std::bad_alloc();
    return ptr;
  }
  void deallocate(void* ptr) noexcept { std::free(ptr); }
};

struct PlimsollTarget {
  Allocator& device;

  void* allocate(std::size_t bytes) { return device.allocate(bytes); }
  void deallocate(void* ptr) { device.deallocate(ptr); }
};

}  // namespace plimsoll::bench
