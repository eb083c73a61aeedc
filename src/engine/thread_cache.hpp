#pragma once
// Per-thread caches in front of a device's heap, so threads allocating and freeing small blocks do not take the
// device lock (docs/engine.md, "Threads").
//
// What it holds, and the invariants kept:
//  - Every block the front has is a *live block of the heap*, allocated with tag kFrontTag and its exact
//    rounded size (Heap::round): the heap never places anything over it, and mapped bytes (the limit) are the
//    heap's alone, so the front can never make a device pass its limit.
//  - A front block is either *handed out* (the program holds it: its word in the HandedTable is set, with its
//    requested bytes and tag) or *cached* (in exactly one thread's cache or the depot, in the bin of its size,
//    its word clear). Never both, never neither. Every binned block the front holds is *prepared* in the table
//    (its leaf made, its 64 KiB region marked) from the moment it leaves the heap (allocate_slow; marks are never
//    cleared), so a cache hit writes its word with one store and reads no region mark; a free looks its word up
//    once and clears it in the leaf that lookup found.
//  - Frees go to the freeing thread's cache, whichever thread allocated (PyTorch's autograd frees on its own
//    threads): the block changes hands with the pointer, so no thread ever writes another's cache. A cache holds
//    at most 64 blocks of a size (past that, the older half of the bin moves to the shared *depot*, where a
//    thread whose bin is empty takes them in batches: one thread frees what another allocates) and
//    `bytes_per_thread` bytes (past that, the older half of every bin moves there). The depot holds at most
//    4 x `bytes_per_thread`; past that, it goes back to the heap whole.
//  - Blocks over kMaxBinned (64 KiB) up to kMaxSize (1 MiB) are *big*: a cache keeps at most kBigSlots of them in
//    a quarter of its `bytes_per_thread`, matched by exact size, the oldest going back to the heap to make room;
//    they never go to the depot (a dead thread's, in a fork()'s child, stay in its cache until a flush). Only once
//    a second thread has joined the front: one thread alone takes the device lock uncontended, and cached big blocks
//    cost it placement (GPT's single-threaded replay: 0.8 ns an operation slower with an eighth of the cache, 1-2 ns
//    with a quarter), where threads sharing a device take its lock 3x less often with them (docs/engine.md, "Threads").
//  - The fast path takes no lock and makes no atomic read-modify-write: a cache's bins are touched by its own
//    thread, inside an *operation* it marks with plain stores (ThreadCache::in_op). Another thread that must empty
//    the cache (flush: trim, out of memory, pause, set_thread_cache(0); the front's destruction) takes the cache's
//    lock, raises its `steal` flag, runs the cold side of util::AsymmetricFence and waits for the owner to leave
//    its operation; the owner, seeing the flag at its next operation, steps out and waits on the lock.
//  - Counters are kept per cache, written by the owner alone (relaxed atomics, no read-modify-write) and summed
//    by totals(): exact whenever no operation is under way. A thread's exit folds its cache's counts into the
//    front's retired counts, under the registry lock totals() also holds; those have room for every chunk of tags
//    any cache counts (made with the chunk), so the exit allocates nothing.
//  - A front that may be turned off (`serving`: the device's pause, a recording attaching, set_thread_cache(0)) is
//    read again by the owner inside its operation, after the barrier's hot side, wherever a block would enter a bin
//    (a free, a refill): a thread that saw it on before it went off neither hands out a block nor keeps a freed one
//    once the flush that follows has passed its cache (the flush's barrier orders the flag's store before the
//    owner's next read, or waits for the operation). The hit does not read it: after that flush the bins are empty,
//    and nothing refills them while the front is off, so a hit can only come before the flush passed (an allocation
//    made before the turn-off); its miss reads it (tests/threads_front_test.cpp, the late thread's test).
//  - Out of host memory, nothing is lost or counted twice: whatever allocates (a thread's cache, a bin's words, a
//    tag's chunk of counts, the depot's growth) runs before an operation changes anything, so an allocation
//    declines (0), a free throws std::bad_alloc with the block still handed out, and a shed gives the block to
//    the heap. A refill (depot batch or heap run) is cut to the bytes left in the cache's budget.
//  - A refill whose block the table could not take (a leaf's mmap refused) declines that size at once, without a trip
//    to the device, for kUnpreparableDeclines requests, then tries again (a hint: declining is always safe).
//  - The hit and the common free call nothing: every rare side is a tail call that takes the operation over and ends
//    it, so neither keeps values across a call (docs/engine.md, "Threads", the small path's second stop).
//  - fork(): a pthread_atfork handler stops every cache's owner and takes every front's locks before the fork, so
//    the child's copy holds no operation half done and no lock of a thread that does not exist there; in the
//    child, the caches of the threads that did not survive stay registered as they were (counted; a flush gives
//    their blocks back). The handlers allocate nothing (docs/engine.md, "Threads", fork()).
//  - A thread's exit empties its own cache; flush() every thread's and the depot; the front's destruction all of
//    them. Lock order: a cache's operation or lock, then the depot, then the device (upstream); the registry lock
//    is never held while taking another.
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/handed_table.hpp"
#include "util/spin_lock.hpp"
#include "util/thread_annotations.hpp"

namespace plimsoll::engine {

/// The heap tag of blocks the front holds (interned tags count up from 1 and stop before it).
inline constexpr std::uint16_t kFrontTag = 0xFFFF;

/// Where the front gets blocks and gives them back: the device, which takes its own lock.
class FrontUpstream {
 public:
  virtual ~FrontUpstream() = default;
  /// Up to `count` live heap blocks of exactly `size` bytes (tag kFrontTag) into `out`, in one trip; how many were
  /// placed (0 when the heap cannot place one).
  virtual std::size_t take_blocks(std::uint64_t size, std::size_t count, std::uint64_t* out) = 0;
  /// Frees front blocks in the heap. A span, so giving one block back allocates nothing (the front's free path
  /// must not throw once the block has left the program's hands).
  virtual void give_back(std::span<const std::uint64_t> addrs) = 0;
};

struct FrontTagCount {
  std::uint64_t bytes = 0, live = 0;  // modular sums: one cache may count a free of another's allocation
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
  static constexpr std::uint64_t kMaxBinned = 64ull << 10;  // sizes kept in per-size bins (and the depot)
  static constexpr std::uint64_t kMaxSize = 1ull << 20;  // requests served by the front, rounded (the heap's small_max)
  static constexpr std::uint64_t kQuantum = 256;           // Heap::kQuantum
  static constexpr std::size_t kBigSlots = 8;  // blocks over kMaxBinned a cache keeps, in up to 1/4 of its bytes
  /// After a refill whose block the handed-out table could not take (a leaf's mmap refused), requests of that size
  /// that would take blocks from the heap are declined at once, without a trip to the device, this many times; the
  /// last of them clears every such size, so the next tries the table again.
  static constexpr std::int32_t kUnpreparableDeclines = 256;

  /// `serving`, when given, says whether the front may hand out and keep blocks; whoever turns it off flushes after.
  ThreadCaches(FrontUpstream& upstream, std::uint64_t bytes_per_thread, const std::atomic<bool>* serving = nullptr);
  /// Gives every cached block back; blocks still handed out stay live in the heap.
  ~ThreadCaches();
  ThreadCaches(const ThreadCaches&) = delete;
  ThreadCaches& operator=(const ThreadCaches&) = delete;

  /// A block for `bytes` (at most kMaxSize), 0 when the heap cannot place one, the front is not serving, or the
  /// cache cannot grow its books (out of host memory): the caller takes the slow path, which flushes and
  /// reports. Never throws. The hit reads no serving flag: a turn-off's flush leaves every bin empty (even out of
  /// host memory), so after it each request misses, and the miss reads the flag.
  std::uint64_t allocate(std::uint64_t bytes, std::uint16_t tag) { return allocate_or(bytes, tag, nullptr, nullptr); }
  /// What answers a request the front declines: the device's own path.
  using Miss = std::uint64_t (*)(void* context, std::uint64_t bytes, std::uint16_t tag);
  /// allocate(), but where it would decline (0), `miss`'s answer (null: 0), asked after the front's operation ended;
  /// throws what `miss` throws. The device's entry point tail-calls it, so a hit returns straight to the program.
  std::uint64_t allocate_or(std::uint64_t bytes, std::uint16_t tag, Miss miss, void* context);
  /// False when addr is not a block the front handed out (the caller's slow path decides: a heap block, or a
  /// bad free). Otherwise the block goes to this thread's cache, or back to the heap when the cache is full or the
  /// front is not serving. Throws std::bad_alloc only when this thread's cache cannot
  /// grow its books, and then before anything changed: the block stays handed out and counted once.
  /// Inline, so that a free of a heap block (the device's path: every request over what the caches serve) costs the
  /// table's read and no call.
  bool deallocate(std::uint64_t addr) {
    const HandedTable::Found found = handed_.find(addr);  // first: a heap block's free reads no thread-local
    if (!HandedTable::handed(found.word)) return false;
    deallocate_handed(addr, found);  // returns nothing, so the caller's call to it is its last (a jump)
    return true;
  }
  /// Whether addr is handed out by the front, with its requested bytes and tag.
  bool handed_out(std::uint64_t addr, std::uint64_t& requested, std::uint16_t& tag) const;
  /// Every thread's cached blocks back to the heap (waiting for each owner to leave its operation). Returns how
  /// many. Allocation-free when it must be: out of host memory the blocks go back a piece at a time, so the bins are
  /// empty after it whatever the host's memory (a turn-off relies on it: the hit reads no serving flag).
  std::size_t flush();
  FrontTotals totals() const;

  /// Whether a thread emptying this thread's cache waits for it to leave its operation (a thief's flush, or a
  /// fork()'s preparation). A seam for tests: an upstream that parks an owner inside its operation polls it.
  bool stop_requested();

  /// A seam for tests (nullptr: none): called by an owner that has raised its operation flag and then found a thread
  /// emptying its cache, before it lowers the flag again. A fork() in that window copies the flag raised into the
  /// child, where no owner will ever lower it (child_after_fork lowers it). Only on that cold path.
  static void set_stopped_owner_seam(void (*seam)()) noexcept;

  /// Which barrier orders a cache's owner against a thread emptying it (util::AsymmetricFence::kind()).
  static const char* barrier_kind();

  /// fork(): every live front, in the order they were made (thread_cache.cpp, "fork()"). Called by the engine's one
  /// pthread_atfork handler set (engine/fork_handlers.hpp), which orders them against the device locks.
  static void prepare_fork();
  /// Makes the list of fronts now (it is made at first use), so the handlers allocate nothing.
  static void make_fork_list();
  static void parent_after_fork();
  static void child_after_fork();

  std::uint64_t bytes_per_thread() const { return bytes_per_thread_.load(std::memory_order_relaxed); }
  /// Whether big blocks (over kMaxBinned) are served: from the second thread to join on, never again off.
  bool big_blocks_on() const { return big_blocks_on_.load(std::memory_order_relaxed); }
  /// Joins this thread to the front if it has not joined yet (out of host memory: not now), so that threads whose
  /// requests are all big count toward big_blocks_on() while their requests are declined. Never throws.
  void count_thread() noexcept;
  void set_bytes_per_thread(std::uint64_t bytes) { bytes_per_thread_.store(bytes, std::memory_order_relaxed); }

 private:
  friend class ThreadCache;
  struct Depot;
  struct Counts;
  ThreadCache& mine();
  [[gnu::noinline]] ThreadCache& join();  // this thread's first operation on this front
  // The rare sides of allocate and deallocate, out of line (thread_cache.cpp, "hot paths").
  [[gnu::noinline]] std::uint64_t allocate_joining(std::uint64_t bytes, std::uint16_t tag, Miss miss, void* context);
  [[gnu::noinline]] std::uint64_t allocate_stopped(ThreadCache& cache, std::uint64_t bytes, std::uint16_t tag, Miss miss,
                                                   void* context);
  /// The hit's rare side (allocate_in_operation), then `miss` when it declined.
  [[gnu::noinline]] std::uint64_t allocate_rare(ThreadCache& cache, std::uint64_t bytes, std::uint16_t tag, Miss miss,
                                                void* context);
  static std::uint64_t missed(Miss miss, void* context, std::uint64_t bytes, std::uint16_t tag);
  /// allocate's rare side inside the operation it began (a miss, a big block, a tag's first counts, a front turned
  /// off), which it ends.
  [[gnu::noinline]] std::uint64_t allocate_in_operation(ThreadCache& cache, std::uint64_t size, std::uint64_t bytes,
                                                        std::uint16_t tag);
  [[gnu::noinline]] std::uint64_t allocate_missed(ThreadCache& cache, std::uint64_t size, std::uint64_t bytes,
                                                  std::uint16_t tag);
  void deallocate_handed(std::uint64_t addr, HandedTable::Found found);  // a block the front handed out, kept
  [[gnu::noinline]] void deallocate_stopped(ThreadCache& cache, std::uint64_t addr, HandedTable::Found found);
  /// deallocate_handed's rare side inside the operation it began, which it ends (throws std::bad_alloc, the block
  /// still handed out, when the tag's counts cannot be made).
  [[gnu::noinline]] void deallocate_in(ThreadCache& cache, std::uint64_t addr, HandedTable::Found found);
  /// A freed block, its word cleared and counted, that its bin cannot take: the full cache's side, which ends the
  /// operation.
  [[gnu::noinline]] void deallocate_full(ThreadCache& cache, std::uint64_t addr, std::uint64_t size);
  [[gnu::noinline]] void deallocate_joining(std::uint64_t addr, HandedTable::Found found);
  [[gnu::noinline]] void deallocate_missed(ThreadCache& cache, std::uint64_t addr, std::uint64_t size, bool keep);
  /// The slow side of allocate: a batch from the depot, else a block from the heap; with its word set.
  std::uint64_t allocate_slow(ThreadCache& cache, std::uint64_t size, std::uint64_t bytes, std::uint16_t tag);
  /// The slow side of deallocate: a full cache sheds blocks to the depot (and the depot to the heap).
  bool keep_in_full_cache(ThreadCache& cache, std::uint64_t addr, std::uint64_t size);
  /// A freed big block into the cache, the oldest big ones back to the heap when there is no room.
  void keep_big(ThreadCache& cache, std::uint64_t addr, std::uint64_t size);
  void forget(ThreadCache* cache);
  /// The cache's counts for `tag`, and the retired counts' room for them, made when missing (before an operation
  /// changes anything); false out of host memory.
  bool tags_ready(ThreadCache& cache, std::uint16_t tag) noexcept;
  /// tags_ready's rare side: a cache's first tag of a chunk of 256.
  [[gnu::noinline]] bool make_tag_room(ThreadCache& cache, std::uint16_t tag) noexcept;
  std::size_t steal_all(ThreadCache& cache);
  /// steal_all out of host memory: kFlushPiece blocks at a time through the stack, allocating nothing.
  std::size_t steal_in_pieces(ThreadCache& cache);
  static constexpr std::size_t kFlushPiece = 256;  // 2 KiB of stack
  /// Whether a refill of `size` from the heap is declined now (kUnpreparableDeclines); counts the decline.
  bool heap_refill_declined(std::uint64_t size) noexcept;
  /// A refill of `size` had a block the table could not take.
  void note_unpreparable(std::uint64_t size) noexcept;
  void count_free_elsewhere(std::uint64_t word);

  void stop_every_owner_for_fork();
  void restart_after_fork(bool child);

  /// Read by the owner inside its operation only (see the class comment).
  bool serving() const { return serving_->load(std::memory_order_relaxed); }

  FrontUpstream& upstream_;
  const std::atomic<bool>* const serving_;  // never null: a front made without one reads kAlwaysServing
  std::atomic<std::uint64_t> bytes_per_thread_;
  const std::uint64_t id_;  // never reused, so a thread's slot for a dead device cannot match a new one
  const bool asymmetric_;  // util::AsymmetricFence::asymmetric(), read once
  HandedTable handed_;
  std::unique_ptr<Depot> depot_;
  mutable util::SpinLock registry_lock_;
  std::vector<std::shared_ptr<ThreadCache>> caches_ PLIMSOLL_GUARDED_BY(registry_lock_);
  std::unique_ptr<Counts> retired_ PLIMSOLL_GUARDED_BY(registry_lock_);  // exited threads' counts
  std::atomic<bool> big_blocks_on_{false};  // a second thread joined: big blocks go through the caches from now on
  // Sizes declined after a refill the table could not take: one bit per binned size, and the bit after them for
  // every big size; and how many declines are left before they are all tried again. Rare sides only. Signed: a
  // decline racing a new note (its store, then its bit) may count below zero, which reads as spent (clears the bits)
  // where an unsigned count would wrap to four billion declines.
  std::array<std::atomic<std::uint64_t>, kMaxBinned / kQuantum / 64 + 1> unpreparable_{};
  std::atomic<std::int32_t> unpreparable_declines_left_{0};
  // The fork handlers' state, under the list of fronts' lock (thread_cache.cpp, "fork()"): whether this front is in
  // that list (from its first cache on); the caches' copy the preparation walks, and the caches whose locks the
  // forking thread holds between prepare_fork and the handlers after it, each with room for every cache (join).
  bool for_fork_ = false;
  std::vector<std::shared_ptr<ThreadCache>> fork_seen_;
  std::vector<std::shared_ptr<ThreadCache>> held_for_fork_;
};

}  // namespace plimsoll::engine
