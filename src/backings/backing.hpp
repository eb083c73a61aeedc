#pragma once
// Where a device's memory comes from. The engine asks a backing for address space once, then maps and
// unmaps granules inside it as the heap grows and shrinks, the way CUDA virtual memory works
// (cuMemAddressReserve, then cuMemCreate + cuMemMap per granule). A device without virtual memory
// management (plain cudaMalloc) fits the same interface only whole: reserve() allocates the budget and
// map() of ranges inside it always succeeds, i.e. the preallocate policy (docs/engine.md, "CUDA backings").
#include <cstdint>
#include <string>

#include "backings/device_copy.hpp"
#include "backings/stream_events.hpp"

namespace plimsoll::backings {

struct BackingMemory {
  std::uint64_t total_bytes = 0;  // the device's capacity
  std::uint64_t free_bytes = 0;   // what the device reports free right now (others' use included)
};

/// Host backings only: what the kernel holds for us. Zero elsewhere.
struct HostPages {
  std::uint64_t committed_bytes = 0;  // mapped read/write (counted against the capacity)
  std::uint64_t resident_bytes = 0;   // actually in RAM (touched)
};

class Backing {
 public:
  virtual ~Backing() = default;

  /// Reserves `bytes` of address space (a multiple of granularity()); no memory. Returns 0 when refused.
  virtual std::uintptr_t reserve(std::uint64_t bytes) = 0;
  virtual void unreserve(std::uintptr_t base, std::uint64_t bytes) noexcept = 0;
  /// Backs [addr, addr + bytes) with memory. Both granule-aligned, inside a reservation. False when the
  /// device has no memory left (or a fault is injected); nothing is mapped then.
  virtual bool map(std::uintptr_t addr, std::uint64_t bytes) = 0;
  virtual void unmap(std::uintptr_t addr, std::uint64_t bytes) noexcept = 0;

  virtual std::uint64_t granularity() const noexcept = 0;
  virtual BackingMemory memory() const = 0;
  virtual HostPages host_pages() const { return {}; }
  /// Whether the memory can be read and written by this process (false for the simulated device).
  virtual bool touchable() const noexcept = 0;
  virtual std::string describe() const = 0;
  /// The device's events, for stream-ordered reuse; nullptr (the default) where memory is used in program order.
  virtual StreamEvents* stream_events() noexcept { return nullptr; }
  /// How to copy mapped memory to the host and back (pausing a device with its contents kept); nullptr where it
  /// cannot be done (the simulated device has no contents). By default: memcpy when the memory is touchable().
  virtual DeviceCopy* device_copy() noexcept { return touchable() ? &touchable_memory_copy() : nullptr; }
  /// Whether a refused map() may be worth waiting for (memory other processes were asked to give back): then the
  /// engine tries an allocation that failed once more, after wait_for_memory(), which it calls without its lock.
  virtual bool can_wait_for_memory() const noexcept { return false; }
  virtual void wait_for_memory() noexcept {}
};

}  // namespace plimsoll::backings
