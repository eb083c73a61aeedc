#pragma once
// Where a device's memory comes from. The engine asks a backing for address space once, then maps and
// unmaps granules inside it as the heap grows and shrinks, the way CUDA virtual memory works
// (cuMemAddressReserve, then cuMemCreate + cuMemMap per granule). A device without virtual memory
// management (plain cudaMalloc) fits the same interface only whole: reserve() allocates the budget and
// map() of ranges inside it always succeeds, i.e. the preallocate policy (docs/engine.md, "CUDA backings").
//
// The contract, the same for every backing (tests/backings_contract_test.cpp runs one suite against each):
//   - reserve(bytes): bytes a non-zero multiple of granularity(), else std::logic_error. Returns a
//     granularity-aligned base, or 0 when refused (nothing reserved then).
//   - map(addr, bytes): a granule-aligned range inside one reservation with nothing in it mapped, else
//     std::logic_error (checked before the backing acts, so a wrong call changes nothing). All or nothing: true
//     with the whole range mapped, or false with none of it (out of memory, an injected fault, a driver refusal),
//     or std::bad_alloc with none of it (the host out of memory for a backing's own books, made before it acts:
//     the heap then declines with HeapFailure::host_memory). Recording a map or an unmap allocates nothing.
//   - unmap(addr, bytes): a granule-aligned range inside one reservation, all of it mapped; any part of a mapped
//     range may be unmapped (the heap trims granules in any grouping).
//   - unreserve(base, bytes): exactly a range reserve() returned, with NOTHING inside it still mapped: the caller
//     unmaps first. CUDA's cuMemAddressFree refuses a range with mappings, so that is the rule for all backings;
//     a backing that quietly unmapped instead would hide a heap that lost track of a granule, and an adaptor that
//     charges maps (the shared-GPU backing) would never be credited for them.
//   - unmap and unreserve are noexcept: a wrong call there says what is wrong on stderr and aborts, since going on
//     would unmap or account memory that is not ours.
//   - Thread-safe: the calls are serialized by the backing's lock, which is held while the backing acts.
//   - mapped_bytes() is what is mapped now, readable at any time without the lock.
//
// Shape (RMM's resources, the non-virtual interface): the public calls are not virtual; they take the lock, check
// the call against the backing's MappingLedger, call the private do_* hook to act, and record what it did. A
// backing implements only the hooks, so no backing can skip a check or keep its books differently.
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

#include "backings/device_copy.hpp"
#include "backings/mapping_ledger.hpp"
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
  Backing(const Backing&) = delete;
  Backing& operator=(const Backing&) = delete;

  /// Reserves `bytes` of address space; no memory. Returns 0 when refused.
  std::uintptr_t reserve(std::uint64_t bytes);
  void unreserve(std::uintptr_t base, std::uint64_t bytes) noexcept;
  /// Backs [addr, addr + bytes) with memory. False when the device has no memory left (or a fault is injected);
  /// nothing is mapped then.
  bool map(std::uintptr_t addr, std::uint64_t bytes);
  void unmap(std::uintptr_t addr, std::uint64_t bytes) noexcept;

  std::uint64_t granularity() const noexcept { return granularity_; }
  /// Bytes mapped now, through this backing.
  std::uint64_t mapped_bytes() const noexcept { return mapped_bytes_.load(std::memory_order_relaxed); }
  BackingMemory memory() const { return do_memory(); }
  HostPages host_pages() const;
  /// Whether the memory can be read and written by this process (false for the simulated device).
  bool touchable() const noexcept { return do_touchable(); }
  std::string describe() const { return do_describe(); }
  /// The device's events, for stream-ordered reuse; nullptr where memory is used in program order.
  StreamEvents* stream_events() noexcept { return do_stream_events(); }
  /// How to copy mapped memory to the host and back (pausing a device with its contents kept); nullptr where it
  /// cannot be done (the simulated device has no contents). By default: memcpy when the memory is touchable().
  DeviceCopy* device_copy() noexcept { return do_device_copy(); }
  /// Whether a refused map() may be worth waiting for (memory other processes were asked to give back): then the
  /// engine tries an allocation that failed once more, after wait_for_memory(), which it calls without its lock.
  bool can_wait_for_memory() const noexcept { return do_can_wait_for_memory(); }
  void wait_for_memory() noexcept { do_wait_for_memory(); }

  /// fork(): the engine's handlers take the backing's lock (then an adaptor's upstream's, as the calls nest them,
  /// then the backing's own leaf locks: do_lock_own_for_fork) right after the device's lock, and release them all
  /// after the fork, so the child inherits no lock held by a thread that does not exist there (host_pages() takes
  /// the backing's lock outside the device lock; last_driver_error() a CUDA backing's error lock outside both).
  /// Only from those handlers: nothing else may be held or called meanwhile. A backing reached more than once in
  /// one fork (shared by logical devices' views) is locked at its first call and released at its last.
  /// lock_for_fork() = lock_self_for_fork() then lock_rest_for_fork() (the upstream's, then the own leaf locks):
  /// the handlers take every device backing's own lock before any upstream's, since a view's host_pages() holds
  /// the view's lock while it waits for the shared upstream's.
  void lock_for_fork() noexcept;
  void lock_self_for_fork() noexcept;
  void lock_rest_for_fork() noexcept;
  void unlock_after_fork() noexcept;

 protected:
  /// `kind` names the backing in misuse messages ("host", "CUDA"). Throws InvalidArgument when `granularity` is
  /// not a power of two.
  Backing(std::string_view kind, std::uint64_t granularity);

  /// The book of reservations and mappings, for hooks (called with the lock held) and destructors (when no
  /// other thread can call). Hooks see the state before the current call is recorded.
  const MappingLedger& ledger() const noexcept { return ledger_; }

 private:
  // The hooks act; the checks and the books are done around them. reserve returns 0 and map false when the
  // device refuses; unmap and unreserve cannot fail (a driver failure there aborts: it cannot be reported).
  virtual std::uintptr_t do_reserve(std::uint64_t bytes) = 0;
  virtual void do_unreserve(std::uintptr_t base, std::uint64_t bytes) noexcept = 0;
  virtual bool do_map(std::uintptr_t addr, std::uint64_t bytes) = 0;
  virtual void do_unmap(std::uintptr_t addr, std::uint64_t bytes) noexcept = 0;
  virtual BackingMemory do_memory() const = 0;
  /// Called with the lock held.
  virtual HostPages do_host_pages() const { return {}; }
  virtual bool do_touchable() const noexcept = 0;
  virtual std::string do_describe() const = 0;
  virtual StreamEvents* do_stream_events() noexcept { return nullptr; }
  virtual DeviceCopy* do_device_copy() noexcept { return touchable() ? &touchable_memory_copy() : nullptr; }
  virtual bool do_can_wait_for_memory() const noexcept { return false; }
  virtual void do_wait_for_memory() noexcept {}
  /// An adaptor's upstream, taken after this backing's lock (and released before it).
  virtual void do_lock_upstream_for_fork() noexcept {}
  virtual void do_unlock_upstream_after_fork() noexcept {}
  /// Locks the backing keeps for itself (a CUDA backing's last driver error, read without the backing's lock): taken
  /// after the backing's lock and its upstream's, released before them. Each must be a leaf (nothing is taken
  /// under it) that a hook may take under the backing's lock, so this order is the calls' own.
  virtual void do_lock_own_for_fork() noexcept {}
  virtual void do_unlock_own_after_fork() noexcept {}

  [[noreturn]] void throw_misuse(const std::string& problem) const;

  const std::string kind_;
  const std::uint64_t granularity_;
  mutable std::mutex mutex_;
  MappingLedger ledger_;                         // guarded by mutex_
  std::atomic<std::uint64_t> mapped_bytes_{0};   // == ledger_.mapped_bytes(), readable without the lock
  int fork_self_holds_ = 0;  // fork(): times mutex_ was reached in this fork (only the forking thread)
  int fork_rest_holds_ = 0;  // fork(): times the upstream's and own locks were reached
};

}  // namespace plimsoll::backings
