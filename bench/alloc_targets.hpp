#pragma once
// The allocators a benchmark compares, behind one tiny interface so the replay loop calls each directly
// (a template parameter, not a virtual call: the call itself is part of what is measured).
#include <cstddef>
#include <cstdint>
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

/// No allocator at all: what the replay harness itself costs per operation (reading the trace's events, keeping the
/// live pointers, a call into a function the compiler cannot see through and its return), beside which an
/// allocator's mean is its own work plus this. Hands out distinct fake addresses, so --touch cannot run with it.
struct EmptyTarget {
  [[gnu::noinline]] void* allocate(std::size_t bytes) {
    next_ += 256;
    asm volatile("" : : "r"(bytes) : "memory");  // the call stays a call, as an allocator's would
    return reinterpret_cast<void*>(next_);
  }
  [[gnu::noinline]] void deallocate(void* ptr) noexcept { asm volatile("" : : "r"(ptr) : "memory"); }

  std::uintptr_t next_ = 1ull << 40;
};

struct PlimsollTarget {
  Allocator& device;

  void* allocate(std::size_t bytes) { return device.allocate(bytes); }
  void deallocate(void* ptr) { device.deallocate(ptr); }
};

}  // namespace plimsoll::bench
