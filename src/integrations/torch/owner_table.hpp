#pragma once
// Address -> owning plimsoll device and size, for libtorch's deleter, which gets the data pointer alone (raw_deleter()
// contract: the DataPtr's context is the data pointer itself, so the context cannot name the owner).
//
// Invariant: a pointer is in the table from the moment the CPU allocator hands it to libtorch until its deleter
// runs, and maps to the Allocator that returned it. Live allocations never share an address (Allocator::allocate
// gives distinct non-null pointers, zero bytes included), so one entry per pointer is exact: the table answers
// without asking any device (so without taking any device's lock), and a free from another thread or outside the
// DeviceScope that allocated finds the right owner. Sharded by address so threads rarely meet on one mutex.
#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>

namespace plimsoll {
class Allocator;
}

namespace plimsoll::torch {

class OwnerTable {
 public:
  /// The device that allocated a pointer, and the bytes asked for (which c10's memory reporting wants back at the
  /// free, as DefaultCPUAllocator's reporter keeps them).
  struct Owner {
    Allocator* device = nullptr;
    std::size_t bytes = 0;
  };

  void insert(const void* ptr, Allocator* owner, std::size_t bytes) {
    Shard& s = shard(ptr);
    std::lock_guard<std::mutex> lock(s.mutex);
    s.owners[ptr] = Owner{owner, bytes};
  }

  /// Removes `ptr` and returns its owner; a null device when the table does not know it.
  Owner take(const void* ptr) {
    Shard& s = shard(ptr);
    std::lock_guard<std::mutex> lock(s.mutex);
    auto found = s.owners.find(ptr);
    if (found == s.owners.end()) return Owner{};
    const Owner owner = found->second;
    s.owners.erase(found);
    return owner;
  }

 private:
  static constexpr std::size_t kShards = 64;
  struct alignas(64) Shard {
    std::mutex mutex;
    std::unordered_map<const void*, Owner> owners;
  };

  Shard& shard(const void* ptr) {
    // Allocations are 256-byte aligned: drop those bits, then mix so neighbouring blocks spread over shards.
    auto bits = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(ptr)) >> 8;
    bits *= 0x9E3779B97F4A7C15ULL;
    return shards_[static_cast<std::size_t>(bits >> 58) % kShards];
  }

  std::array<Shard, kShards> shards_{};
};

}  // namespace plimsoll::torch
