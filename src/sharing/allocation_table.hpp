#pragma once
// What each live driver allocation was charged (a cuMemFree gives only the address). Sharded by address so that
// threads allocating at once rarely meet on one lock.
#include <array>
#include <cstdint>
#include <mutex>
#include <optional>
#include <unordered_map>

namespace plimsoll::sharing {

struct Charged {
  int device = 0;
  std::uint64_t bytes = 0;
};

class AllocationTable {
 public:
  void insert(std::uint64_t key, Charged charged) {
    Shard& shard = shard_of(key);
    const std::lock_guard lock(shard.mutex);
    shard.entries[key] = charged;
  }
  /// Removes and returns the entry, or nothing for a key never inserted (or already removed).
  std::optional<Charged> take(std::uint64_t key) {
    Shard& shard = shard_of(key);
    const std::lock_guard lock(shard.mutex);
    const auto found = shard.entries.find(key);
    if (found == shard.entries.end()) return std::nullopt;
    const Charged charged = found->second;
    shard.entries.erase(found);
    return charged;
  }

  /// fork(): every shard's lock (leaves: nothing is taken under one), released on both sides after it.
  void lock_for_fork() noexcept {
    for (Shard& shard : shards_) shard.mutex.lock();  // NOLINT: released by unlock_after_fork
  }
  void unlock_after_fork() noexcept {
    for (auto shard = shards_.rbegin(); shard != shards_.rend(); ++shard) shard->mutex.unlock();
  }

 private:
  struct Shard {
    std::mutex mutex;
    std::unordered_map<std::uint64_t, Charged> entries;
  };
  Shard& shard_of(std::uint64_t key) noexcept {
    // Driver addresses are at least 256-byte aligned: mix the higher bits.
    const std::uint64_t mixed = (key >> 8) * 0x9e3779b97f4a7c15ULL;
    return shards_[mixed >> 60];
  }
  std::array<Shard, 16> shards_;
};

}  // namespace plimsoll::sharing
