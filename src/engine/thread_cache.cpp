#include "engine/thread_cache.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <mutex>
#include <new>
#include <thread>
#include <utility>

#include "engine/fork_handlers.hpp"
#include "util/asymmetric_fence.hpp"

namespace plimsoll::engine {

namespace {

constexpr std::size_t kClasses = ThreadCaches::kMaxBinned / ThreadCaches::kQuantum;
constexpr std::size_t kBigSlots = ThreadCaches::kBigSlots;
constexpr std::uint64_t kBigShare = 4;  // big blocks hold at most 1 / kBigShare of a cache's bytes
static_assert(ThreadCaches::kQuantum == std::uint64_t{1} << HandedTable::kQuantumShift,
              "the handed-out table keeps one word per quantum: a block's start");
static_assert(ThreadCaches::kMaxSize < (std::uint64_t{1} << 32), "a table word keeps requested bytes in 32 bits");
static_assert(HandedTable::wide(ThreadCaches::kMaxBinned + 1) && !HandedTable::wide(ThreadCaches::kMaxBinned),
              "big blocks, and only they, keep their word in a region's wide word");

constexpr std::size_t kDepth = 64;  // blocks of one size a cache keeps: a step's worth of one tensor shape
constexpr std::size_t kBatch = kDepth / 2;  // blocks moved between a cache and the depot at once
constexpr std::uint64_t kDepotPerThread = 4;  // the depot holds up to this many caches' worth

std::atomic<void (*)()> stopped_owner_seam{nullptr};  // ThreadCaches::set_stopped_owner_seam

std::uint64_t rounded(std::uint64_t bytes) {
  return ((bytes ? bytes : 1) + ThreadCaches::kQuantum - 1) & ~(ThreadCaches::kQuantum - 1);
}
std::size_t class_of(std::uint64_t size) { return static_cast<std::size_t>(size / ThreadCaches::kQuantum) - 1; }

std::atomic<std::uint64_t> next_front_id{1};

// Every live front, for the fork handlers, in the order they were made. Never destroyed: a fork during static
// destruction still finds it.
struct LiveFronts {
  std::mutex lock;
  std::vector<ThreadCaches*> fronts;
};
LiveFronts& live_fronts() {
  static auto* const fronts = new LiveFronts;
  return *fronts;
}

// A counter only one thread writes at a time, read by others (totals()): no locked instruction. Modular: a cache may
// count the free of another cache's allocation.
// On x86-64 one `add` to memory (one instruction, one macro-op on Zen and Intel cores), where a relaxed load and store
// of the atomic compile to three (no compiler fuses atomic loads and stores into an `add`): the hit writes five counts
// and the free four, so this is 10 and 8 instructions of about 90 each (docs/engine.md, "Threads", the speed stop).
// Exactly as safe as the load and store: only the owner writes (inside its operation, or a thief that waited for it),
// and an aligned 8-byte store is single-copy atomic on x86-64, so a reader's relaxed load sees the old value or the
// new one, never a torn one; the asm's "+m" tells the compiler the word is read and written. ThreadSanitizer does not
// see inside asm, so its builds (and other architectures) keep the load and store it checks.
#if defined(__SANITIZE_THREAD__)
#define PLIMSOLL_BUMP_PORTABLE 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define PLIMSOLL_BUMP_PORTABLE 1
#endif
#endif
#if !defined(__x86_64__)
#define PLIMSOLL_BUMP_PORTABLE 1
#endif
void bump(std::atomic<std::uint64_t>& counter, std::uint64_t delta) {
#ifdef PLIMSOLL_BUMP_PORTABLE
  counter.store(counter.load(std::memory_order_relaxed) + delta, std::memory_order_relaxed);
#else
  static_assert(sizeof(counter) == sizeof(std::uint64_t) && std::atomic<std::uint64_t>::is_always_lock_free);
  asm("addq %1, %0" : "+m"(counter) : "er"(delta));
#endif
}
#undef PLIMSOLL_BUMP_PORTABLE
std::uint64_t read(const std::atomic<std::uint64_t>& counter) { return counter.load(std::memory_order_relaxed); }

// Per-tag handed-out bytes and blocks of one cache, in chunks of 256 tags made when a tag is first counted (owner
// only; published with release so totals() reads a whole chunk). A chunk is made by ready(), before the operation
// changes anything, so counting itself never allocates (and never throws).
class TagCounts {
 public:
  struct Count {
    std::atomic<std::uint64_t> bytes{0}, live{0};
  };
  TagCounts() = default;
  TagCounts(const TagCounts&) = delete;
  TagCounts& operator=(const TagCounts&) = delete;
  ~TagCounts() {
    for (std::atomic<Chunk*>& chunk : chunks_) delete chunk.load(std::memory_order_relaxed);
  }
  /// Whether `tag`'s chunk exists already.
  bool has(std::uint16_t tag) const noexcept { return chunks_[tag >> 8].load(std::memory_order_relaxed) != nullptr; }
  /// Whether `tag` can be counted; makes its chunk when missing, false when that fails (out of host memory).
  bool ready(std::uint16_t tag) noexcept {
    if (has(tag)) [[likely]] return true;
    Chunk* chunk = new (std::nothrow) Chunk{};
    if (chunk == nullptr) return false;
    chunks_[tag >> 8].store(chunk, std::memory_order_release);
    return true;
  }
  /// The counts of `tag`'s chunk of 256, null when none was made (ready()): the hot paths test and use one load.
  Count* chunk_of(std::uint16_t tag) const noexcept {
    Chunk* chunk = chunks_[tag >> 8].load(std::memory_order_relaxed);
    return chunk != nullptr ? chunk->data() : nullptr;
  }
  /// Counts for a tag ready() said yes to.
  void add(std::uint16_t tag, std::uint64_t bytes, std::uint64_t live) noexcept {
    add_in(chunk_of(tag), tag, bytes, live);
  }
  /// The same, in the chunk chunk_of(tag) gave.
  static void add_in(Count* chunk, std::uint16_t tag, std::uint64_t bytes, std::uint64_t live) noexcept {
    bump(chunk[tag & 0xFF].bytes, bytes);
    bump(chunk[tag & 0xFF].live, live);
  }
  /// Adds every tag's counts into `out`, and their sums over all tags into `all` (the cache's handed-out bytes and
  /// blocks, which the hot paths do not keep apart from the tags').
  void sum_into(std::vector<FrontTagCount>& out, FrontTagCount& all) const {
    for (std::size_t c = 0; c < chunks_.size(); ++c) {
      const Chunk* chunk = chunks_[c].load(std::memory_order_acquire);
      if (chunk == nullptr) continue;
      for (std::size_t t = 0; t < chunk->size(); ++t) {
        const std::uint64_t bytes = read((*chunk)[t].bytes), live = read((*chunk)[t].live);
        if (bytes == 0 && live == 0) continue;
        all.bytes += bytes;
        all.live += live;
        const std::size_t tag = c * 256 + t;
        if (tag >= out.size()) out.resize(tag + 1);
        out[tag].bytes += bytes;
        out[tag].live += live;
      }
    }
  }

 private:
  using Chunk = std::array<Count, 256>;
  std::array<std::atomic<Chunk*>, 256> chunks_{};
};

}  // namespace

// One size's blocks in a cache: room for kDepth addresses, made once (ready()) before an operation changes anything,
// so that no push can reach an allocator (a std::vector's push_back keeps a call to its growth on the hot path, and
// with it a stack frame of saved registers). Newest at the top.
class CacheBin {
 public:
  bool ready() const noexcept { return room_ != 0; }
  /// Makes the room; false out of host memory.
  bool make_ready() noexcept {
    if (room_ != 0) return true;
    slots_.reset(new (std::nothrow) std::uint64_t[kDepth]);
    if (slots_ == nullptr) return false;
    room_ = kDepth;
    return true;
  }
  bool empty() const noexcept { return count_ == 0; }
  std::size_t size() const noexcept { return count_; }
  bool full() const noexcept { return count_ >= room_; }  // also when not ready: no room at all
  std::uint64_t pop() noexcept { return slots_[--count_]; }
  void push(std::uint64_t addr) noexcept { slots_[count_++] = addr; }  // ready and not full
  std::span<const std::uint64_t> blocks() const noexcept { return {slots_.get(), count_}; }
  /// Drops the `count` oldest blocks (the bottom).
  void drop_oldest(std::size_t count) noexcept {
    std::copy(slots_.get() + count, slots_.get() + count_, slots_.get());
    count_ -= static_cast<std::uint32_t>(count);
  }
  /// Adds blocks (ready, with room for them).
  void append(const std::uint64_t* addrs, std::size_t count) noexcept {
    std::copy(addrs, addrs + count, slots_.get() + count_);
    count_ += static_cast<std::uint32_t>(count);
  }
  void clear() noexcept { count_ = 0; }

 private:
  std::unique_ptr<std::uint64_t[]> slots_;
  std::uint32_t count_ = 0;
  std::uint32_t room_ = 0;  // kDepth once ready
};

// What exited threads' caches counted, kept so totals() stays exact after they are gone.
struct ThreadCaches::Counts {
  std::uint64_t handed_bytes = 0, handed_requested = 0, allocations = 0, frees = 0;
  std::vector<FrontTagCount> tags;

  void count_tag(std::uint16_t tag, std::uint64_t bytes, std::uint64_t live) {
    if (tag >= tags.size()) tags.resize(static_cast<std::size_t>(tag) + 1);
    tags[tag].bytes += bytes;
    tags[tag].live += live;
  }
};

// One thread's cache. Its bins and counters are written by its owner inside an operation (begin/end), or by a
// thread emptying it, which holds `lock` and has waited for the owner to leave its operation (steal_all).
class ThreadCache {
 public:
  explicit ThreadCache(ThreadCaches* owner) : owner_(owner) {}

  // Taken by threads emptying the cache, by the owner when it finds `steal` raised, and around its exit.
  util::SpinLock lock;

  /// The owner enters an operation. Hot side of the barrier: a plain store, a compiler fence (or a full one where
  /// membarrier is missing), then the flag. While another thread empties the cache, the owner waits on its lock.
  void begin(bool asymmetric) {
    while (!try_begin(asymmetric)) wait_for_thief();
  }
  /// begin() without the wait, for the hot paths (which must call nothing, so they keep no registers across a call):
  /// false when a thread is emptying the cache, with the flag still raised; the caller then calls wait_for_thief()
  /// and starts over.
  bool try_begin(bool asymmetric) {
    in_op_.store(true, std::memory_order_relaxed);
    util::AsymmetricFence::light(asymmetric);
    return !steal_.load(std::memory_order_acquire);
  }
  /// After a try_begin() that found a thief: lowers the flag and waits until the thief is done.
  [[gnu::noinline]] void wait_for_thief() {
    if (void (*seam)() = stopped_owner_seam.load(std::memory_order_relaxed)) [[unlikely]] seam();
    in_op_.store(false, std::memory_order_release);
    util::SpinGuard wait(lock);  // the thief holds it until the cache is empty and the flag down
  }
  void end() { in_op_.store(false, std::memory_order_release); }

  /// begin() to end() over a scope, so an exception (a vector's bad_alloc) cannot leave a thief waiting.
  class Operation {
   public:
    Operation(ThreadCache& cache, bool asymmetric) : cache_(cache) { cache_.begin(asymmetric); }
    /// Takes over an operation a hot path began (try_begin), to end it on every way out of a rare side.
    struct Adopt {};
    Operation(ThreadCache& cache, Adopt) : cache_(cache) {}
    ~Operation() { cache_.end(); }
    Operation(const Operation&) = delete;
    Operation& operator=(const Operation&) = delete;

   private:
    ThreadCache& cache_;
  };

  /// Cold side: with `lock` held, stops the owner at its next operation and waits for the current one to end.
  void stop_owner(bool asymmetric) PLIMSOLL_REQUIRES(lock) {
    steal_.store(true, std::memory_order_relaxed);
    util::AsymmetricFence::heavy(asymmetric);
    for (unsigned spins = 0; in_op_.load(std::memory_order_acquire); ++spins) {
      if (spins > 64) std::this_thread::yield();
    }
  }
  void release_owner() PLIMSOLL_REQUIRES(lock) { steal_.store(false, std::memory_order_release); }
  /// In a fork()'s child only: no thread of the child is inside an operation (only the forking thread exists there,
  /// and it forked outside one), but an owner stopped before the fork may have raised the flag again in begin()
  /// between the stop and the fork, before it saw `steal`: the copy would keep it raised forever.
  void end_operation_in_child() PLIMSOLL_REQUIRES(lock) { in_op_.store(false, std::memory_order_relaxed); }
  bool stop_requested() const { return steal_.load(std::memory_order_relaxed); }

  ThreadCaches* owner() const PLIMSOLL_REQUIRES(lock) { return owner_; }
  void disown() PLIMSOLL_REQUIRES(lock) { owner_ = nullptr; }

  /// The newest block of size class `cls` (of `size` bytes), false when its bin is empty: the hit tests the bin's
  /// count, not the address too.
  bool try_pop(std::size_t cls, std::uint64_t size, std::uint64_t& addr) {
    CacheBin& bin = bins_[cls];
    if (bin.empty()) return false;
    addr = bin.pop();
    bump(cached_bytes_, 0 - size);  // the block count follows from count_allocation's (see blocks_base_)
    return true;
  }
  /// try_pop for the rare sides: 0 when the bin is empty.
  std::uint64_t pop(std::uint64_t size) {
    std::uint64_t addr = 0;
    return try_pop(class_of(size), size, addr) ? addr : 0;
  }
  /// The counts of `tag`'s chunk, null when not made yet (tags_ready): the hit tests and counts with one load.
  TagCounts::Count* tag_counts(std::uint16_t tag) const noexcept { return tags_.chunk_of(tag); }
  /// Whether the counts of `tag` can take a block without allocating; makes them so when missing (once per 256
  /// tags), false when that fails. Called before an operation changes anything (ThreadCaches::tags_ready).
  bool has_tag_counts(std::uint16_t tag) const noexcept { return tags_.has(tag); }
  bool tags_ready(std::uint16_t tag) noexcept { return tags_.ready(tag); }
  /// The same for the bin of `size` (once per size: kDepth words).
  bool bin_ready(std::uint64_t size) noexcept {
    CacheBin& bin = bins_[class_of(size)];
    if (bin.ready()) [[likely]] return true;
    return bin.make_ready();
  }
  /// Never allocates: false for a bin not made ready (bin_ready) yet.
  bool push(std::uint64_t addr, std::uint64_t size, std::uint64_t cap) noexcept {
    return push(addr, class_of(size), size, cap);
  }
  /// push() into size class `cls` (of `size` bytes), which the free worked out already.
  bool push(std::uint64_t addr, std::size_t cls, std::uint64_t size, std::uint64_t cap) noexcept {
    CacheBin& bin = bins_[cls];
    const std::uint64_t cached = read(cached_bytes_);
    if (cached + size > cap || bin.full()) return false;
    bin.push(addr);
    cached_bytes_.store(cached + size, std::memory_order_relaxed);  // its block count follows from count_free's
    return true;
  }
  /// A cached big block of exactly `size` (the most recently kept first); 0 when none.
  std::uint64_t pop_big(std::uint64_t size) noexcept {
    for (std::size_t i = big_count_; i-- > 0;) {
      if (big_sizes_[i] != size) continue;
      const std::uint64_t addr = big_addrs_[i];
      forget_big(i);
      return addr;
    }
    return 0;
  }
  /// Keeps a freed big block, moving the oldest big ones into `evicted` (room for kBigSlots) until it fits: at most
  /// kBigSlots of them, in at most `cap` / kBigShare, and `cap` in all. False, with nothing moved, when it cannot fit
  /// even with no big block left (the bins hold the rest of `cap`). Never allocates.
  bool push_big(std::uint64_t addr, std::uint64_t size, std::uint64_t cap, std::uint64_t* evicted,
                std::size_t& count) noexcept {
    if (size > cap / kBigShare || read(cached_bytes_) - big_bytes_ + size > cap) return false;
    while (big_count_ == kBigSlots || big_bytes_ + size > cap / kBigShare || read(cached_bytes_) + size > cap) {
      evicted[count++] = big_addrs_[0];
      forget_big(0);
      leave_uncounted(1);
    }
    big_addrs_[big_count_] = addr;
    big_sizes_[big_count_] = size;
    ++big_count_;
    big_bytes_ += size;
    bump(cached_bytes_, size);  // a freed block: its count follows from count_free's
    return true;
  }
  /// Moves every big block into `out` (room for kBigSlots); how many.
  std::size_t take_big(std::uint64_t* out) noexcept {
    const std::size_t count = big_count_;
    std::copy(big_addrs_.begin(), big_addrs_.begin() + static_cast<std::ptrdiff_t>(count), out);
    bump(cached_bytes_, 0 - big_bytes_);
    leave_uncounted(count);
    big_count_ = 0;
    big_bytes_ = 0;
    return count;
  }
  /// Moves up to `count` blocks of `size` out of the cache (the oldest: the bin's bottom) into `out`.
  void take(std::uint64_t size, std::size_t count, std::vector<std::uint64_t>& out) {
    CacheBin& bin = bins_[class_of(size)];
    count = std::min(count, bin.size());
    const std::span<const std::uint64_t> oldest = bin.blocks().first(count);
    out.insert(out.end(), oldest.begin(), oldest.end());
    bin.drop_oldest(count);
    bump(cached_bytes_, 0 - count * size);
    leave_uncounted(count);
  }
  /// Adds blocks of `size` the depot handed over (at most kBatch, into an empty bin made ready before).
  void refill(std::uint64_t size, const std::uint64_t* addrs, std::size_t count) noexcept {
    bins_[class_of(size)].append(addrs, count);
    bump(cached_bytes_, count * size);
    bump(blocks_base_, count);
  }
  std::vector<std::uint64_t> take_all() {
    std::vector<std::uint64_t> all;
    std::size_t blocks = big_count_;
    for (const CacheBin& bin : bins_) blocks += bin.size();
    all.reserve(blocks);
    for (CacheBin& bin : bins_) {
      all.insert(all.end(), bin.blocks().begin(), bin.blocks().end());
      bin.clear();
    }
    all.insert(all.end(), big_addrs_.begin(), big_addrs_.begin() + static_cast<std::ptrdiff_t>(big_count_));
    big_count_ = 0;
    big_bytes_ = 0;
    cached_bytes_.store(0, std::memory_order_relaxed);
    leave_uncounted(all.size());
    return all;
  }
  /// Moves up to `room` cached blocks into `out` (bins, then big blocks), allocating nothing: a flush out of host
  /// memory for take_all's list (ThreadCaches::steal_in_pieces). How many.
  std::size_t take_some(std::uint64_t* out, std::size_t room) noexcept {
    std::size_t taken = 0;
    std::uint64_t bytes = 0;
    for (std::size_t cls = 0; cls < bins_.size() && taken < room; ++cls) {
      CacheBin& bin = bins_[cls];
      for (; !bin.empty() && taken < room; ++taken) {
        out[taken] = bin.pop();
        bytes += (cls + 1) * ThreadCaches::kQuantum;
      }
    }
    bump(cached_bytes_, 0 - bytes);
    for (; big_count_ != 0 && taken < room; ++taken) {
      out[taken] = big_addrs_[big_count_ - 1];
      forget_big(big_count_ - 1);  // which takes its bytes off cached_bytes_
    }
    leave_uncounted(taken);
    return taken;
  }
  /// Gives every cached block to `upstream` bin by bin: allocates nothing, for paths that must not throw (a
  /// thread's exit, the front's destruction). Only where the owner cannot be waiting for the device.
  void give_all_back(FrontUpstream& upstream) noexcept {
    std::size_t blocks = big_count_;
    for (CacheBin& bin : bins_) {
      if (bin.empty()) continue;
      blocks += bin.size();
      upstream.give_back(bin.blocks());
      bin.clear();
    }
    if (big_count_ != 0) upstream.give_back(std::span(big_addrs_.data(), big_count_));
    big_count_ = 0;
    big_bytes_ = 0;
    cached_bytes_.store(0, std::memory_order_relaxed);
    leave_uncounted(blocks);
  }
  std::size_t held(std::size_t cls) const { return bins_[cls].size(); }
  std::uint64_t cached_bytes() const { return read(cached_bytes_); }

  /// What the program took from or gave back to the front through this thread: the fewest counts from which
  /// sum_into() works out every total exactly (the hot paths' share of the work; docs/engine.md, "Threads").
  /// A block popped from a bin and handed out (or freed and pushed) needs no block count of its own: blocks_base_
  /// minus the tags' live blocks is the cache's block count (see blocks_base_).
  void count_allocation(std::uint64_t size, std::uint64_t requested, std::uint16_t tag) {
    bump(handed_requested_, requested);
    bump(allocations_, 1);
    tags_.add(tag, size, 1);
  }
  void count_free(std::uint64_t size, std::uint64_t requested, std::uint16_t tag) {
    bump(handed_requested_, 0 - requested);
    tags_.add(tag, 0 - size, 0 - std::uint64_t{1});
  }
  /// The same two, in the chunk tag_counts(tag) gave.
  void count_allocation_in(TagCounts::Count* counts, std::uint64_t size, std::uint64_t requested, std::uint16_t tag) {
    bump(handed_requested_, requested);
    bump(allocations_, 1);
    TagCounts::add_in(counts, tag, size, 1);
  }
  void count_free_in(TagCounts::Count* counts, std::uint64_t size, std::uint64_t requested, std::uint16_t tag) {
    bump(handed_requested_, 0 - requested);
    TagCounts::add_in(counts, tag, 0 - size, 0 - std::uint64_t{1});
  }
  /// A counted allocation whose block was not in the cache (a big block straight from the heap).
  void count_not_cached() noexcept { bump(blocks_base_, 1); }
  /// Blocks that left the cache without a counted allocation, or a counted free whose block did not enter it.
  void leave_uncounted(std::uint64_t blocks) noexcept { bump(blocks_base_, 0 - blocks); }
  void sum_into(FrontTotals& totals) const {
    FrontTagCount handed;
    tags_.sum_into(totals.tags, handed);
    totals.handed_bytes += handed.bytes;
    totals.handed_requested += read(handed_requested_);
    const std::uint64_t allocations = read(allocations_);
    totals.allocations += allocations;
    totals.frees += allocations - handed.live;
    totals.cached_bytes += read(cached_bytes_);
    totals.cached_blocks += read(blocks_base_) - handed.live;
  }
  void sum_into(ThreadCaches::Counts& counts) const {
    FrontTagCount handed;
    tags_.sum_into(counts.tags, handed);
    counts.handed_bytes += handed.bytes;
    counts.handed_requested += read(handed_requested_);
    const std::uint64_t allocations = read(allocations_);
    counts.allocations += allocations;
    counts.frees += allocations - handed.live;
  }

  /// The thread is exiting: its blocks go back to the heap, and the front forgets it.
  void retire() {
    util::SpinGuard guard(lock);
    if (owner_ == nullptr) return;
    give_all_back(owner_->upstream_);
    owner_->forget(this);
    owner_ = nullptr;
  }

 private:
  // Hot fields first, each written by the owner alone on the fast path.
  std::atomic<bool> in_op_{false};
  std::atomic<bool> steal_{false};
  // Kept apart from the tags' counts: what the program asked for, and how many allocations (the frees are the
  // allocations less the tags' live blocks; the handed-out bytes, the tags' bytes summed).
  std::atomic<std::uint64_t> cached_bytes_{0}, handed_requested_{0}, allocations_{0};
  // The cache's block count plus the blocks this cache counted live (tags_): a bin's pop that hands a block out and
  // a push of a freed block leave it as it is (the block count and the live count move together), so the hot paths
  // write no block count; everything else that moves blocks in or out adjusts it (refill, take, the big blocks, a
  // free given to the heap). Modular, like every count here.
  std::atomic<std::uint64_t> blocks_base_{0};
  std::array<CacheBin, kClasses> bins_;
  // Big blocks, oldest first, with their sizes (owner only, like the bins).
  std::array<std::uint64_t, kBigSlots> big_addrs_{}, big_sizes_{};
  std::size_t big_count_ = 0;
  std::uint64_t big_bytes_ = 0;
  TagCounts tags_;
  ThreadCaches* owner_ PLIMSOLL_GUARDED_BY(lock);

  void forget_big(std::size_t i) noexcept {
    const std::uint64_t size = big_sizes_[i];
    const auto from = static_cast<std::ptrdiff_t>(i + 1), to = static_cast<std::ptrdiff_t>(big_count_);
    std::copy(big_addrs_.begin() + from, big_addrs_.begin() + to, big_addrs_.begin() + from - 1);
    std::copy(big_sizes_.begin() + from, big_sizes_.begin() + to, big_sizes_.begin() + from - 1);
    --big_count_;
    big_bytes_ -= size;
    bump(cached_bytes_, 0 - size);  // the block count: the caller's (a counted allocation, or leave_uncounted)
  }
};

// Blocks one thread freed and another will allocate (a producer and a consumer of tensors) pass through here in
// batches, so neither takes the device lock per block.
struct ThreadCaches::Depot {
  util::SpinLock lock;
  std::array<std::vector<std::uint64_t>, kClasses> bins PLIMSOLL_GUARDED_BY(lock);
  std::uint64_t bytes PLIMSOLL_GUARDED_BY(lock) = 0;
  std::uint64_t blocks PLIMSOLL_GUARDED_BY(lock) = 0;

  /// Moves the `count` oldest blocks of size class `cls` from `cache` to this depot.
  void accept(ThreadCache& cache, std::size_t cls, std::size_t count) PLIMSOLL_REQUIRES(lock);

  std::vector<std::uint64_t> take_all() PLIMSOLL_REQUIRES(lock) {
    std::vector<std::uint64_t> all;
    all.reserve(blocks);  // the one allocation, before anything is taken: a throw leaves the depot whole
    for (std::vector<std::uint64_t>& bin : bins) {
      all.insert(all.end(), bin.begin(), bin.end());
      bin.clear();
    }
    bytes = 0;
    blocks = 0;
    return all;
  }
  /// take_all's blocks `room` at a time into `out`, allocating nothing (a flush out of host memory); how many.
  std::size_t take_some(std::uint64_t* out, std::size_t room) noexcept PLIMSOLL_REQUIRES(lock) {
    std::size_t taken = 0;
    for (std::size_t cls = 0; cls < bins.size() && taken < room; ++cls) {
      std::vector<std::uint64_t>& bin = bins[cls];
      for (; !bin.empty() && taken < room; ++taken) {
        out[taken] = bin.back();
        bin.pop_back();
        bytes -= (cls + 1) * ThreadCaches::kQuantum;
        --blocks;
      }
    }
    return taken;
  }
};

void ThreadCaches::Depot::accept(ThreadCache& cache, std::size_t cls, std::size_t count) {
  const std::uint64_t size = (cls + 1) * ThreadCaches::kQuantum;
  std::vector<std::uint64_t>& bin = bins[cls];
  const std::size_t before = bin.size();
  bin.reserve(before + std::min(count, cache.held(cls)));  // the one allocation, before anything moves
  cache.take(size, count, bin);
  bytes += (bin.size() - before) * size;
  blocks += bin.size() - before;
}

namespace {

// This thread's caches, one per front it used. Its destructor runs at thread exit and returns them.
struct ThreadSlots {
  struct Slot {
    std::uint64_t front_id;
    std::shared_ptr<ThreadCache> cache;
  };
  std::vector<Slot> slots;
  ~ThreadSlots();
};

// Initial-exec: in the shared objects that link the engine (the Python module's libplimsoll_python.so, the preload
// libraries) the default model for position-independent code is general-dynamic, two calls to __tls_get_addr on
// every front operation; initial-exec reads them at a fixed offset from the thread pointer, as the executables do.
// The whole object's TLS block (128 bytes in the Python module's library) then comes from the static surplus glibc
// keeps for libraries loaded with dlopen, with room to spare (tests/python checks a fresh interpreter imports the
// module). docs/engine.md, "Figures", has the cost and the sizes.
#define PLIMSOLL_INITIAL_EXEC [[gnu::tls_model("initial-exec")]]
PLIMSOLL_INITIAL_EXEC thread_local ThreadSlots t_slots;
// The cache of the front this thread used last, one thread_local (one address computed on the hot paths).
struct LastCache {
  std::uint64_t id = 0;  // a front's id_; 0: none (or the thread is exiting)
  ThreadCache* cache = nullptr;
};
PLIMSOLL_INITIAL_EXEC thread_local LastCache t_last;
// After ThreadSlots is gone: the front steps aside for this thread.
PLIMSOLL_INITIAL_EXEC thread_local bool t_exiting = false;
#undef PLIMSOLL_INITIAL_EXEC

// What a front made without a `serving` flag reads: it always serves (one load on the hot paths, no null test).
constinit const std::atomic<bool> kAlwaysServing{true};

ThreadSlots::~ThreadSlots() {
  t_exiting = true;
  t_last = {};
  for (Slot& slot : slots) slot.cache->retire();
}

}  // namespace

ThreadCaches::ThreadCaches(FrontUpstream& upstream, std::uint64_t bytes_per_thread, const std::atomic<bool>* serving)
    : upstream_(upstream),
      serving_(serving != nullptr ? serving : &kAlwaysServing),
      bytes_per_thread_(bytes_per_thread),
      id_(next_front_id.fetch_add(1, std::memory_order_relaxed)),
      asymmetric_(util::AsymmetricFence::asymmetric()),
      depot_(std::make_unique<Depot>()),
      retired_(std::make_unique<Counts>()) {}

ThreadCaches::~ThreadCaches() {
  {
    // First: a fork from now on leaves this front alone (one under way holds the lock until its child runs).
    const std::lock_guard guard(live_fronts().lock);
    std::erase(live_fronts().fronts, this);
  }
  std::vector<std::shared_ptr<ThreadCache>> caches;
  {
    util::SpinGuard guard(registry_lock_);
    caches.swap(caches_);
  }
  for (const std::shared_ptr<ThreadCache>& cache : caches) {
    util::SpinGuard guard(cache->lock);
    cache->stop_owner(asymmetric_);
    cache->give_all_back(upstream_);
    cache->disown();
    cache->release_owner();
  }
  util::SpinGuard guard(depot_->lock);
  for (std::vector<std::uint64_t>& bin : depot_->bins) {  // bin by bin: a destructor allocates nothing
    if (!bin.empty()) upstream_.give_back(bin);
  }
}

// fork(). Only the forking thread lives on in the child: a cache whose owner was inside an operation would keep
// `in_op` raised there forever (the child's next flush would wait for it), a lock another thread held would never
// be released, and a bin or the depot could be copied half changed. So before the fork, every front stops every
// owner as a flush does (its cache's lock, `steal`, the barrier, the wait) and takes its depot's and registry's
// locks: the copy holds no operation under way and no half-made change. Lock order as everywhere: caches' locks,
// then the depot, then the registry (a thread exiting holds its cache's lock and then takes the registry's).
// In the child, the caches of threads that do not exist there go to the depot, their counts to the retired ones;
// the forking thread's own cache stays its own. Both sides then lower the flags and release every lock.
void ThreadCaches::prepare_fork() PLIMSOLL_NO_THREAD_SAFETY_ANALYSIS {
  live_fronts().lock.lock();
  for (ThreadCaches* front : live_fronts().fronts) front->stop_every_owner_for_fork();
}

void ThreadCaches::parent_after_fork() PLIMSOLL_NO_THREAD_SAFETY_ANALYSIS {
  for (ThreadCaches* front : live_fronts().fronts) front->restart_after_fork(false);
  live_fronts().lock.unlock();
}

void ThreadCaches::make_fork_list() { (void)live_fronts(); }

void ThreadCaches::child_after_fork() PLIMSOLL_NO_THREAD_SAFETY_ANALYSIS {
  for (ThreadCaches* front : live_fronts().fronts) front->restart_after_fork(true);
  live_fronts().lock.unlock();
}

// Allocation-free: the handlers run inside fork(), where a std::bad_alloc could not be reported (it would leave a C
// callback) and another allocator in the process may hold its own locks. The two lists below have room for every
// cache: a thread joins under the list of fronts' lock (join), which the preparation holds until the handlers after
// the fork ran, and reserves room for itself first; a cache leaves caches_ only when its thread exits, under its
// lock, and then no longer has this front as owner.
void ThreadCaches::stop_every_owner_for_fork() PLIMSOLL_NO_THREAD_SAFETY_ANALYSIS {
  {
    util::SpinGuard guard(registry_lock_);
    fork_seen_.assign(caches_.begin(), caches_.end());  // within the capacity join reserved
  }
  for (const std::shared_ptr<ThreadCache>& cache : fork_seen_) {
    cache->lock.lock();
    if (cache->owner() != this) {  // its thread exited since the copy: no longer in caches_, nothing to stop
      cache->lock.unlock();
      continue;
    }
    cache->stop_owner(asymmetric_);
    held_for_fork_.push_back(cache);  // within capacity: held caches are in caches_ while held
  }
  fork_seen_.clear();
  depot_->lock.lock();
  registry_lock_.lock();
}

void ThreadCaches::restart_after_fork(bool child) PLIMSOLL_NO_THREAD_SAFETY_ANALYSIS {
  // In the child, the caches of threads that do not exist there stay registered, as they were: their counts count
  // as before (totals() stays exact) and a flush (trim, out of memory, pause) gives their blocks back. Moving them to
  // the depot here would grow its bins inside fork().
  for (const std::shared_ptr<ThreadCache>& cache : held_for_fork_) {
    if (child) cache->end_operation_in_child();
    cache->release_owner();
    cache->lock.unlock();
  }
  held_for_fork_.clear();  // keeps the capacity
  registry_lock_.unlock();
  depot_->lock.unlock();
}

bool ThreadCaches::stop_requested() { return mine().stop_requested(); }

void ThreadCaches::set_stopped_owner_seam(void (*seam)()) noexcept {
  stopped_owner_seam.store(seam, std::memory_order_relaxed);
}

const char* ThreadCaches::barrier_kind() { return util::AsymmetricFence::kind(); }

ThreadCache& ThreadCaches::mine() {
  if (t_last.id == id_) [[likely]] return *t_last.cache;
  return join();
}

ThreadCache& ThreadCaches::join() {
  for (const ThreadSlots::Slot& slot : t_slots.slots) {
    if (slot.front_id == id_) {
      t_last = {id_, slot.cache.get()};
      return *t_last.cache;
    }
  }
  // First use on this thread: drop slots of fronts that are gone, then join this one. What allocates comes before
  // anything is registered, so a bad_alloc leaves nothing half joined.
  std::erase_if(t_slots.slots, [](const ThreadSlots::Slot& slot) {
    util::SpinGuard guard(slot.cache->lock);
    return slot.cache->owner() == nullptr;
  });
  t_slots.slots.reserve(t_slots.slots.size() + 1);
  auto cache = std::make_shared<ThreadCache>(this);
  install_fork_handlers();
  {
    // Under the list of fronts' lock, so no fork runs between the room made for this cache in the fork handlers'
    // lists and its registration (stop_every_owner_for_fork allocates nothing). The fork handlers learn of a front
    // at its first cache (a front without caches has nothing to stop), here and not in the constructor: a device
    // makes its front under its lock, which an owner stopped by a fork's preparation may be waiting for, while the
    // preparation holds the list of fronts.
    const std::lock_guard fork_guard(live_fronts().lock);
    if (!for_fork_) live_fronts().fronts.push_back(this);
    for_fork_ = true;
    std::size_t caches = 0;
    {
      util::SpinGuard guard(registry_lock_);
      caches = caches_.size() + 1;
    }
    fork_seen_.reserve(caches);
    held_for_fork_.reserve(caches);
    util::SpinGuard guard(registry_lock_);
    caches_.push_back(cache);
    if (caches_.size() > 1) big_blocks_on_.store(true, std::memory_order_relaxed);
  }
  t_slots.slots.push_back({id_, cache});
  t_last = {id_, cache.get()};
  return *t_last.cache;
}

void ThreadCaches::forget(ThreadCache* cache) {
  util::SpinGuard guard(registry_lock_);
  cache->sum_into(*retired_);  // in the same critical section as the removal: totals() sees it exactly once
  std::erase_if(caches_, [&](const std::shared_ptr<ThreadCache>& c) { return c.get() == cache; });
}

// Inline, with its rare side out of line: it runs on every operation of the front.
[[gnu::always_inline]] inline bool ThreadCaches::tags_ready(ThreadCache& cache, std::uint16_t tag) noexcept {
  return cache.has_tag_counts(tag) || make_tag_room(cache, tag);
}

bool ThreadCaches::make_tag_room(ThreadCache& cache, std::uint16_t tag) noexcept {
  // A cache's first tag of a chunk of 256: the retired counts get room for the whole chunk first, so that a thread's
  // exit (forget) and a free during it (count_free_elsewhere) fold counts in without growing a vector. Every tag a
  // cache counts lies in a chunk made here, so the retired counts always cover it.
  const std::size_t chunk_end = (static_cast<std::size_t>(tag >> 8) + 1) * 256;
  std::vector<FrontTagCount> grown;
  for (;;) {
    std::size_t have = 0;
    {
      util::SpinGuard guard(registry_lock_);
      have = retired_->tags.size();
      if (have >= chunk_end) break;
      if (grown.size() == chunk_end) {  // made outside the spin lock, moved in under it (no allocation here)
        std::copy(retired_->tags.begin(), retired_->tags.end(), grown.begin());
        retired_->tags.swap(grown);
        break;
      }
    }
    try {
      grown.assign(chunk_end, FrontTagCount{});
    } catch (const std::bad_alloc&) {
      return false;
    }
  }
  return cache.tags_ready(tag);
}

void ThreadCaches::count_free_elsewhere(std::uint64_t word) {
  const std::uint64_t size = rounded(HandedTable::requested(word));
  util::SpinGuard guard(registry_lock_);
  retired_->count_tag(HandedTable::tag(word), 0 - size, 0 - std::uint64_t{1});  // covered: tags_ready made room
  retired_->handed_bytes -= size;
  retired_->handed_requested -= HandedTable::requested(word);
  ++retired_->frees;
}

std::size_t ThreadCaches::steal_all(ThreadCache& cache) {
  std::vector<std::uint64_t> all;
  bool out_of_memory = false;
  {
    util::SpinGuard guard(cache.lock);
    cache.stop_owner(asymmetric_);
    try {
      all = cache.take_all();
    } catch (const std::bad_alloc&) {
      out_of_memory = true;  // nothing taken: steal_in_pieces takes them without a list
    } catch (...) {
      cache.release_owner();  // nothing taken: the owner goes on with its cache whole
      throw;
    }
    cache.release_owner();
  }
  if (out_of_memory) return steal_in_pieces(cache);
  // After the owner runs again: giving back takes the device lock, which the owner may be waiting for.
  if (!all.empty()) upstream_.give_back(all);
  return all.size();
}

// A flush must empty every bin whatever the host's memory: the hit reads no serving flag, it relies on a turn-off's
// flush leaving the bins empty. Without room for take_all's list, the blocks go back a piece at a time through a
// buffer on the stack, the owner stopped for each piece and running again before it is given back (as above). Ends
// at a piece that is not full: while the front is off nothing refills a bin; while it is on (trim) a piece at a
// time is as good as any moment.
std::size_t ThreadCaches::steal_in_pieces(ThreadCache& cache) {
  std::array<std::uint64_t, kFlushPiece> piece;
  std::size_t stolen = 0;
  for (;;) {
    std::size_t count = 0;
    {
      util::SpinGuard guard(cache.lock);
      cache.stop_owner(asymmetric_);
      count = cache.take_some(piece.data(), piece.size());
      cache.release_owner();
    }
    if (count != 0) upstream_.give_back(std::span(piece.data(), count));
    stolen += count;
    if (count < piece.size()) return stolen;
  }
}

// A table whose leaf cannot be made (mmap refused: the address space or the map count is spent) keeps failing: each
// request would take a run from the heap, give it back and go to the device's path, three trips of the device lock.
// The size is declined at once instead (the device's path alone: one trip) for kUnpreparableDeclines requests.
// Declining is always safe (the device serves the request), so the bits and the count are a hint: relaxed atomics.
bool ThreadCaches::heap_refill_declined(std::uint64_t size) noexcept {
  const std::size_t bit = size > kMaxBinned ? kClasses : class_of(size);
  if ((unpreparable_[bit / 64].load(std::memory_order_relaxed) & (std::uint64_t{1} << (bit % 64))) == 0) [[likely]]
    return false;
  if (unpreparable_declines_left_.fetch_sub(1, std::memory_order_relaxed) <= 1) {
    for (std::atomic<std::uint64_t>& bits : unpreparable_) bits.store(0, std::memory_order_relaxed);
  }
  return true;
}

void ThreadCaches::note_unpreparable(std::uint64_t size) noexcept {
  const std::size_t bit = size > kMaxBinned ? kClasses : class_of(size);
  unpreparable_declines_left_.store(kUnpreparableDeclines, std::memory_order_relaxed);
  unpreparable_[bit / 64].fetch_or(std::uint64_t{1} << (bit % 64), std::memory_order_relaxed);
}

std::uint64_t ThreadCaches::allocate_slow(ThreadCache& cache, std::uint64_t size, std::uint64_t bytes, std::uint16_t tag) {
  if (size > kMaxBinned) {
    // A big block: one from the heap, as a front block, so its free comes back to a cache.
    if (heap_refill_declined(size)) return 0;
    std::uint64_t addr = 0;
    if (upstream_.take_blocks(size, 1, &addr) == 0) return 0;
    if (!handed_.set(addr, HandedTable::word(bytes, tag))) {
      note_unpreparable(size);
      upstream_.give_back(std::span(&addr, 1));
      return 0;
    }
    cache.count_not_cached();  // allocate_missed counts its allocation
    return addr;
  }
  if (!cache.bin_ready(size)) return 0;  // before a block is taken: refill must not allocate
  std::array<std::uint64_t, kBatch> batch;
  // One block goes to the program; what stays in the cache must fit in what is left of `bytes_per_thread`.
  const std::uint64_t cap = bytes_per_thread(), cached = cache.cached_bytes();
  const std::uint64_t room = cap > cached ? cap - cached : 0;
  const auto most = static_cast<std::size_t>(std::min<std::uint64_t>(kBatch, 1 + room / size));
  std::size_t count = 0;
  {
    util::SpinGuard depot_guard(depot_->lock);
    std::vector<std::uint64_t>& bin = depot_->bins[class_of(size)];
    count = std::min(most, bin.size());
    std::copy(bin.end() - static_cast<std::ptrdiff_t>(count), bin.end(), batch.begin());
    bin.resize(bin.size() - count);
    depot_->bytes -= count * size;
    depot_->blocks -= count;
  }
  if (count == 0) {
    if (heap_refill_declined(size)) return 0;
    // From the heap: blocks under 2 KiB in a run filling 2 KiB (adjacent in a fresh small page), so the words of
    // one cache line of the handed-out table, and the blocks' own lines, mostly belong to one thread.
    count = upstream_.take_blocks(size, std::min<std::uint64_t>(most, (2048 + size - 1) / size), batch.data());
    std::reverse(batch.begin(), batch.begin() + static_cast<std::ptrdiff_t>(count));  // handed out in address order
    // Prepared for the table as they enter the front (leaf made, region marked), so every hit after writes its word
    // with one store. Out of memory for a leaf (mmap refused), the whole run goes back: the device's path serves it.
    for (std::size_t i = 0; i < count; ++i) {
      if (!handed_.prepare(batch[i], false)) {
        note_unpreparable(size);
        upstream_.give_back(std::span(batch.data(), count));
        return 0;
      }
    }
  }
  cache.refill(size, batch.data(), count);
  const std::uint64_t addr = cache.pop(size);
  if (addr != 0) HandedTable::set_prepared(handed_.prepared_leaf(addr, HandedTable::wide(bytes)), addr,
                                             HandedTable::word(bytes, tag));
  return addr;
}

// The hot paths below are small on purpose: whatever is rare (a thread's first operation, a miss, a full cache,
// a big block) is in a function of its own, reached by a tail call that ends the operation itself, so the hit calls
// nothing and keeps no value across a call: no stack frame of saved registers.
// `miss`, when given, answers instead of a decline (0): the device's entry point passes its own path, so it tail-calls
// this and a hit returns straight to the program (no frame in the entry point, no test of the answer there). Every
// rare side below calls it only after its operation ended.
std::uint64_t ThreadCaches::allocate_or(std::uint64_t bytes, std::uint16_t tag, Miss miss, void* context) {
  const LastCache last = t_last;
  if (last.id != id_) [[unlikely]] return allocate_joining(bytes, tag, miss, context);  // also an exiting thread (id 0)
  ThreadCache& cache = *last.cache;
  if (!cache.try_begin(asymmetric_)) [[unlikely]] return allocate_stopped(cache, bytes, tag, miss, context);
  // The size class of rounded(bytes), worked out from bytes: 0 bytes wraps past every class (the rare side rounds it
  // up to one quantum), as does anything over kMaxBinned, so one compare tests both.
  const std::uint64_t cls = (bytes - 1) / kQuantum;
  // No read of `serving` here: whoever turns the front off flushes every cache after (pause, a recording attaching,
  // set_thread_cache(0)), and while it is off nothing refills a bin (allocate_in_operation and every free read it
  // inside their operation), so a bin holds a block only before that flush passed this cache; a hit then is an
  // allocation made before the pause, as if a moment earlier. After it the bins are empty and the miss reads it.
  TagCounts::Count* const counts = cache.tag_counts(tag);
  if (counts == nullptr || cls >= kClasses) [[unlikely]] return allocate_rare(cache, bytes, tag, miss, context);
  std::uint64_t addr = 0;
  const std::uint64_t size = (cls + 1) * kQuantum;
  if (!cache.try_pop(cls, size, addr)) [[unlikely]] return allocate_rare(cache, bytes, tag, miss, context);
  // A binned block was prepared when it entered the front (allocate_slow): its word is one store.
  HandedTable::set_prepared_plain(handed_.prepared_leaf(addr, false), addr, HandedTable::word(bytes, tag));
  cache.count_allocation_in(counts, size, bytes, tag);
  cache.end();
  return addr;
}

std::uint64_t ThreadCaches::missed(Miss miss, void* context, std::uint64_t bytes, std::uint16_t tag) {
  return miss != nullptr ? miss(context, bytes, tag) : 0;
}

std::uint64_t ThreadCaches::allocate_rare(ThreadCache& cache, std::uint64_t bytes, std::uint16_t tag, Miss miss,
                                          void* context) {
  const std::uint64_t addr = allocate_in_operation(cache, rounded(bytes), bytes, tag);  // which ends the operation
  return addr != 0 ? addr : missed(miss, context, bytes, tag);
}

std::uint64_t ThreadCaches::allocate_stopped(ThreadCache& cache, std::uint64_t bytes, std::uint16_t tag, Miss miss,
                                             void* context) {
  cache.wait_for_thief();
  return allocate_or(bytes, tag, miss, context);
}

std::uint64_t ThreadCaches::allocate_in_operation(ThreadCache& cache, std::uint64_t size, std::uint64_t bytes,
                                                  std::uint16_t tag) {
  const ThreadCache::Operation operation(cache, ThreadCache::Operation::Adopt{});
  // The tag's counts (and in allocate_slow the bin) made before anything changes, so nothing below allocates: this
  // runs inside try_allocate, which is noexcept. Out of host memory for them, the device's own path serves it.
  if (!serving() || !tags_ready(cache, tag)) return 0;
  const std::uint64_t addr = size <= kMaxBinned ? cache.pop(size) : 0;
  if (addr == 0) return allocate_missed(cache, size, bytes, tag);
  HandedTable::set_prepared_plain(handed_.prepared_leaf(addr, false), addr, HandedTable::word(bytes, tag));
  cache.count_allocation(size, bytes, tag);
  return addr;
}

void ThreadCaches::count_thread() noexcept {
  if (t_last.id == id_ || t_exiting) [[likely]] return;
  try {
    join();
  } catch (const std::bad_alloc&) {
    // No cache for this thread now; a later request tries again.
  }
}

std::uint64_t ThreadCaches::allocate_joining(std::uint64_t bytes, std::uint16_t tag, Miss miss, void* context) {
  if (t_exiting) return missed(miss, context, bytes, tag);
  bool joined = true;
  try {
    join();
  } catch (const std::bad_alloc&) {
    joined = false;  // no cache for this thread (out of host memory): the device's own path serves it
  }
  if (!joined) return missed(miss, context, bytes, tag);  // outside the handler: it may throw its own report
  return allocate_or(bytes, tag, miss, context);
}

std::uint64_t ThreadCaches::allocate_missed(ThreadCache& cache, std::uint64_t size, std::uint64_t bytes,
                                            std::uint16_t tag) {
  if (size > kMaxBinned && !big_blocks_on()) return 0;  // one thread: the device's own path, uncontended
  std::uint64_t addr = size > kMaxBinned ? cache.pop_big(size) : 0;
  if (addr != 0 && !handed_.set(addr, HandedTable::word(bytes, tag))) {
    cache.leave_uncounted(1);
    upstream_.give_back(std::span(&addr, 1));
    return 0;
  }
  if (addr == 0) addr = allocate_slow(cache, size, bytes, tag);
  if (addr != 0) cache.count_allocation(size, bytes, tag);
  return addr;
}

// Full. A bin at its depth: its older half goes to the depot. The cache at its bytes: the older half of every bin
// goes, so sizes the job no longer asks for do not hold the cache forever. A depot past its bytes goes back to the
// heap whole: what nobody took back since it last emptied is not wanted.
// The depot's bins grow here: each move is all or nothing (Depot::accept reserves first), and out of host memory
// the block goes to the heap instead (false), so the free neither throws nor loses it.
bool ThreadCaches::keep_in_full_cache(ThreadCache& cache, std::uint64_t addr, std::uint64_t size) {
  // This size's first block on this thread: its bin is made here (out of memory, the block goes to the heap).
  if (!cache.bin_ready(size)) return false;
  if (cache.push(addr, size, bytes_per_thread())) return true;
  std::vector<std::uint64_t> to_heap;
  std::array<std::uint64_t, kBigSlots> big;
  std::size_t big_count = 0;
  try {
    util::SpinGuard depot_guard(depot_->lock);
    const std::size_t cls = class_of(size);
    if (cache.held(cls) >= kDepth) {
      depot_->accept(cache, cls, kBatch);
    } else {
      for (std::size_t c = 0; c < kClasses; ++c) depot_->accept(cache, c, (cache.held(c) + 1) / 2);
      big_count = cache.take_big(big.data());  // nobody takes big blocks from the depot: they go to the heap
    }
    if (depot_->bytes / kDepotPerThread > bytes_per_thread()) to_heap = depot_->take_all();  // no overflow
  } catch (const std::bad_alloc&) {
    if (big_count != 0) upstream_.give_back(std::span(big.data(), big_count));
    return false;
  }
  if (big_count != 0) upstream_.give_back(std::span(big.data(), big_count));
  if (!to_heap.empty()) upstream_.give_back(to_heap);
  return cache.push(addr, size, bytes_per_thread());
}

void ThreadCaches::keep_big(ThreadCache& cache, std::uint64_t addr, std::uint64_t size) {
  std::array<std::uint64_t, kBigSlots + 1> to_heap;
  std::size_t count = 0;
  if (!cache.push_big(addr, size, bytes_per_thread(), to_heap.data(), count)) {
    cache.leave_uncounted(1);  // its free is counted
    to_heap[count++] = addr;
  }
  if (count != 0) upstream_.give_back(std::span(to_heap.data(), count));
}

// Like allocate, the common free calls nothing: what is rare goes to deallocate_in (a tail call), which ends the
// operation; so does deallocate_full after the word is cleared and counted. The device's free calls it last, so the
// device's free builds no frame either.
void ThreadCaches::deallocate_handed(std::uint64_t addr, HandedTable::Found found) {
  const LastCache last = t_last;
  if (last.id != id_) [[unlikely]] return deallocate_joining(addr, found);  // also an exiting thread
  ThreadCache& cache = *last.cache;
  if (!cache.try_begin(asymmetric_)) [[unlikely]] return deallocate_stopped(cache, addr, found);
  const std::uint64_t word = found.word;
  const std::uint64_t requested = HandedTable::requested(word);
  const std::uint64_t cls = (requested - 1) / kQuantum;  // as in allocate_or: 0 bytes and big blocks past every class
  TagCounts::Count* const counts = cache.tag_counts(HandedTable::tag(word));
  if (counts == nullptr || cls >= kClasses || !serving()) [[unlikely]] return deallocate_in(cache, addr, found);
  const std::uint64_t size = (cls + 1) * kQuantum;
  HandedTable::clear_plain_in(found.leaf, addr);  // inside the operation, as in deallocate_in; binned: not wide
  cache.count_free_in(counts, size, requested, HandedTable::tag(word));
  if (!cache.push(addr, cls, size, bytes_per_thread())) [[unlikely]] return deallocate_full(cache, addr, size);
  cache.end();
}

void ThreadCaches::deallocate_stopped(ThreadCache& cache, std::uint64_t addr, HandedTable::Found found) {
  cache.wait_for_thief();
  return deallocate_handed(addr, found);
}

void ThreadCaches::deallocate_full(ThreadCache& cache, std::uint64_t addr, std::uint64_t size) {
  const ThreadCache::Operation operation(cache, ThreadCache::Operation::Adopt{});
  deallocate_missed(cache, addr, size, true);
}

// Inside an operation begun by the caller, which it ends on every way out (a bad_alloc included).
void ThreadCaches::deallocate_in(ThreadCache& cache, std::uint64_t addr, HandedTable::Found found) {
  const ThreadCache::Operation operation(cache, ThreadCache::Operation::Adopt{});
  const std::uint64_t word = found.word;
  const std::uint64_t size = rounded(HandedTable::requested(word));
  // Whatever may allocate (and throw) runs before the word is cleared, so a bad_alloc leaves the block handed out
  // and counted once: the program still holds it, and may free it again.
  if (!tags_ready(cache, HandedTable::tag(word))) [[unlikely]] throw std::bad_alloc();
  // Inside the operation: a fork() (or a flush) that waited for it finds the block either handed out or cached.
  HandedTable::clear_in(found.leaf, addr, word);  // the leaf of the lookup above: one radix walk a free
  cache.count_free(size, HandedTable::requested(word), HandedTable::tag(word));
  const bool keep = serving();  // inside the operation, as in allocate: a block kept past a pause's flush would stay
  if (keep && size <= kMaxBinned && cache.push(addr, size, bytes_per_thread())) return;
  deallocate_missed(cache, addr, size, keep);
}

// The word read by deallocate()'s lookup, not a second one: another thread's free of the same block meanwhile could
// have cleared it, and a clear word would count as a 256-byte block of tag 0.
void ThreadCaches::deallocate_joining(std::uint64_t addr, HandedTable::Found found) {
  if (t_exiting) {
    count_free_elsewhere(found.word);  // first: it may throw, with the block still handed out
    HandedTable::clear_in(found.leaf, addr, found.word);
    upstream_.give_back(std::span(&addr, 1));
    return;
  }
  ThreadCache& cache = join();
  cache.begin(asymmetric_);
  return deallocate_in(cache, addr, found);
}

void ThreadCaches::deallocate_missed(ThreadCache& cache, std::uint64_t addr, std::uint64_t size, bool keep) {
  if (keep && size > kMaxBinned) return keep_big(cache, addr, size);
  if (keep && size <= kMaxBinned && keep_in_full_cache(cache, addr, size)) return;
  cache.leave_uncounted(1);  // its free is counted
  upstream_.give_back(std::span(&addr, 1));
}

bool ThreadCaches::handed_out(std::uint64_t addr, std::uint64_t& requested, std::uint16_t& tag) const {
  const std::uint64_t word = handed_.get(addr);
  if (!HandedTable::handed(word)) return false;
  requested = HandedTable::requested(word);
  tag = HandedTable::tag(word);
  return true;
}

// Empties every cache and the depot even out of host memory (a turn-off relies on it: the hit reads no serving flag).
// The caches one at a time from the end of the list, with no copy of it: a thread exiting meanwhile removes its
// cache and shifts the later ones down, so one may be visited twice (found empty the second time), none skipped; one
// joining meanwhile came after the flush began.
std::size_t ThreadCaches::flush() {
  std::size_t flushed = 0;
  for (std::size_t next = SIZE_MAX;;) {
    std::shared_ptr<ThreadCache> cache;  // holds it should its thread exit meanwhile
    {
      util::SpinGuard guard(registry_lock_);
      next = std::min(next, caches_.size());
      if (next == 0) break;
      cache = caches_[--next];
    }
    flushed += steal_all(*cache);
  }
  util::SpinGuard guard(depot_->lock);
  std::vector<std::uint64_t> all;
  try {
    all = depot_->take_all();
  } catch (const std::bad_alloc&) {  // nothing taken: a piece at a time, as steal_in_pieces
    std::array<std::uint64_t, kFlushPiece> piece;
    for (std::size_t count = 0; (count = depot_->take_some(piece.data(), piece.size())) != 0;) {
      upstream_.give_back(std::span(piece.data(), count));
      flushed += count;
    }
    return flushed;
  }
  flushed += all.size();
  if (!all.empty()) upstream_.give_back(all);
  return flushed;
}

FrontTotals ThreadCaches::totals() const {
  FrontTotals totals;
  {
    util::SpinGuard guard(registry_lock_);
    totals.handed_bytes = retired_->handed_bytes;
    totals.handed_requested = retired_->handed_requested;
    totals.allocations = retired_->allocations;
    totals.frees = retired_->frees;
    totals.tags = retired_->tags;
    for (const std::shared_ptr<ThreadCache>& cache : caches_) cache->sum_into(totals);
  }
  totals.handed_live = totals.allocations - totals.frees;
  util::SpinGuard guard(depot_->lock);
  totals.cached_bytes += depot_->bytes;
  totals.depot_bytes = depot_->bytes;
  totals.cached_blocks += depot_->blocks;
  return totals;
}

}  // namespace plimsoll::engine
