#pragma once
// Per-thread caches in front of a device's heap, so threads allocating and freeing small blocks do not take the
// device lock (docs/engine.md, "Threads").
//
// What it holds, and the invariants kept:
//  - Every block the front has is a *live block of the heap*, allocated with tag kFrontTag and its exact
//    rounded size (Heap::round): the heap never places anything over it, and mapped bytes (the limit) are the
//    heap's alone, so the front can never make a device pass its limit.
//  - A front block is either *handed out* (the program holds it: it is in exactly one shard of `handed`, by
//    address, with its requested bytes and tag) or *cached* (in exactly one thread's cache, in the bin of its
//    size). Never both, never neither.
//  - Frees go to the freeing thread's cache, whichever thread allocated (PyTorch's autograd frees on its own
//    threads). A cache holds at most 64 blocks of a size (past that, the older half of the bin moves to the
//    shared *depot*, where a thread whose bin is empty takes them in batches: one thread frees what another
//    allocates) and `bytes_per_thread` bytes (past that, the older half of every bin moves there). The depot
//    holds at most 4 x `bytes_per_thread`; past that, it goes back to the heap whole.
//    Cached blocks (caches and depot) are free for the program.
//  - Counters are kept where the work is (shard counters under the shard's lock, cached bytes under the
//    cache's lock) and summed by totals(): exact whenever no operation is under way.
//  - flush() (trim, out of memory, stats-independent) empties every thread's cache into the heap; a thread's
//    exit empties its own; the front's destruction empties all of them. Lock order: cache, then device
//    (upstream); the registry and shard locks are never held while taking another.
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "util/spin_lock.hpp"
#include "util/thread_annotations.hpp"

namespace plimsoll::engine {

/// The heap tag of blocks the front holds (interned tags count up from 1 and stop before it).
inline constexpr std::uint16_t kFrontTag = 0xFFFF;

/// Where the front gets blocks and gives them back: the device, which takes its own lock.
class FrontUpstream {
 public:
  virtual ~FrontUpstream() = default;
  /// A live heap block of exactly `size` bytes (tag kFrontTag), or 0 when the heap cannot place it.
  virtual std::uint64_t take_block(std::uint64_t size) = 0;
  /// Frees front blocks in the heap.
  virtual void give_back(const std::vector<std::uint64_t>& addrs) = 0;
};

struct FrontTagCount {
  std::uint64_t bytes = 0, live = 0;  // modular sums: one shard may count a free of another's allocation
};

struct FrontTotals {
  std::uint64_t handed_bytes = 0, handed_requested = 0, handed_live = 0;
  std::uint64_t allocations = 0, frees = 0;  // through the front
  std::uint64_t cached_bytes = 0, cached_blocks = 0;  // in caches and the depot
  std::uint64_t depot_bytes = 0;
  std::vector<FrontTagCount> tags;  // handed-out bytes and blocks per program tag
};

class ThreadCache;

class ThreadCaches {
 public:
  static constexpr std::uint64_t kMaxSize = 64ull << 10;  // requests served by the front, rounded
  static constexpr std::uint64_t kQuantum = 256;          // Heap::kQuantum
  static constexpr std::size_t kShards = 256;

  ThreadCaches(FrontUpstream& upstream, std::uint64_t bytes_per_thread);
  /// Gives every cached block back; blocks still handed out stay live in the heap.
  ~ThreadCaches();
  ThreadCaches(const ThreadCaches&) = delete;
  ThreadCaches& operator=(const ThreadCaches&) = delete;

  /// A block for `bytes` (at most kMaxSize), 0 when the heap cannot place one (the caller takes the slow path,
  /// which flushes and reports).
  std::uint64_t allocate(std::uint64_t bytes, std::uint16_t tag);
  /// False when addr is not a block the front handed out (the caller's slow path decides: a heap block, or a
  /// bad free). Otherwise the block goes to this thread's cache, or back to the heap when the cache is full or
  /// `keep` is false.
  bool deallocate(std::uint64_t addr, bool keep = true);
  /// Whether addr is handed out by the front, with its requested bytes and tag.
  bool handed_out(std::uint64_t addr, std::uint64_t& requested, std::uint16_t& tag) const;
  /// Every thread's cached blocks back to the heap. Returns how many.
  std::size_t flush();
  FrontTotals totals() const;

  std::uint64_t bytes_per_thread() const { return bytes_per_thread_.load(std::memory_order_relaxed); }
  void set_bytes_per_thread(std::uint64_t bytes) { bytes_per_thread_.store(bytes, std::memory_order_relaxed); }

 private:
  friend class ThreadCache;
  struct Shard;
  struct Depot;
  Shard& shard_of(std::uint64_t addr) const;
  ThreadCache& mine();
  void forget(const ThreadCache* cache);

  FrontUpstream& upstream_;
  std::atomic<std::uint64_t> bytes_per_thread_;
  const std::uint64_t id_;  // never reused, so a thread's slot for a dead device cannot match a new one
  std::unique_ptr<Shard[]> shards_;
  std::unique_ptr<Depot> depot_;
  mutable util::SpinLock registry_lock_;
  std::vector<std::shared_ptr<ThreadCache>> caches_ PLIMSOLL_GUARDED_BY(registry_lock_);
};

}  // namespace plimsoll::engine
