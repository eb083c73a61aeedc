#pragma once
// Replays a trace's allocations and frees against one allocator, in the order the program made them.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "plimsoll/trace.hpp"

namespace plimsoll::bench {

constexpr std::size_t kPageBytes = 4096;

/// Writes one byte in every page a block overlaps, as a program filling a fresh tensor would: an allocator that
/// hands back pages the kernel must fault in and zero pays for it here, one that reuses resident pages does not.
inline void touch_pages(void* ptr, std::size_t bytes) noexcept {
  if (bytes == 0) return;
  auto* const first = static_cast<volatile unsigned char*>(ptr);
  first[0] = 1;
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  const std::uintptr_t end = address + bytes;
  for (std::uintptr_t page = (address / kPageBytes + 1) * kPageBytes; page < end; page += kPageBytes) {
    first[page - address] = 1;
  }
}

template <class Target>
class TraceReplay {
 public:
  TraceReplay(const Trace& trace, Target& target, bool touch)
      : trace_(trace), target_(target), touch_(touch), live_(trace.slots, nullptr) {}

  /// Allocations plus frees: what a per-operation time is divided by.
  std::size_t operations() const noexcept { return trace_.allocations + trace_.frees; }

  /// One pass over the whole trace, untimed here: the caller times the pass as a whole.
  void run() {
    for (const TraceEvent& event : trace_.events) apply(event);
    release_leftovers();
  }

  /// One pass timing every operation with `now()`; `ticks` receives one sample per allocation or free.
  template <class Now>
  void run_timed(Now now, std::vector<std::uint64_t>& ticks) {
    ticks.clear();
    ticks.reserve(operations());
    for (const TraceEvent& event : trace_.events) {
      if (event.kind != TraceEvent::Kind::allocate && event.kind != TraceEvent::Kind::free) continue;
      const std::uint64_t begin = now();
      apply(event);
      ticks.push_back(now() - begin);
    }
    release_leftovers();
  }

 private:
  void apply(const TraceEvent& event) {
    switch (event.kind) {
      case TraceEvent::Kind::allocate: {
        const auto bytes = static_cast<std::size_t>(event.bytes);
        void* ptr = target_.allocate(bytes);
        if (touch_) touch_pages(ptr, bytes);
        live_[event.slot] = ptr;
        ++live_count_;
        break;
      }
      case TraceEvent::Kind::free:
        target_.deallocate(live_[event.slot]);
        live_[event.slot] = nullptr;
        --live_count_;
        break;
      case TraceEvent::Kind::marker:
      case TraceEvent::Kind::map:  // what the recording device did: not the program's calls
      case TraceEvent::Kind::unmap:
      case TraceEvent::Kind::oom:
        break;
    }
  }

  /// Every trace ends with nothing live; a truncated one must not leak into the next pass.
  void release_leftovers() {
    if (live_count_ == 0) return;
    live_count_ = 0;
    for (void*& ptr : live_) {
      if (ptr != nullptr) target_.deallocate(ptr);
      ptr = nullptr;
    }
  }

  const Trace& trace_;
  Target& target_;
  bool touch_;
  std::vector<void*> live_;
  std::size_t live_count_ = 0;
};

}  // namespace plimsoll::bench
