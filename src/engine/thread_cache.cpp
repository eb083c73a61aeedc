#include "engine/thread_cache.hpp"

#include <bit>
#include <utility>

namespace plimsoll::engine {

namespace {

constexpr std::size_t kClasses = ThreadCaches::kMaxSize / ThreadCaches::kQuantum;

constexpr std::size_t kDepth = 64;  // blocks of one size a cache keeps: a step's worth of one tensor shape
constexpr std::size_t kBatch = kDepth / 2;  // blocks moved between a cache and the depot at once
constexpr std::uint64_t kDepotPerThread = 4;  // the depot holds up to this many caches' worth

std::uint64_t rounded(std::uint64_t bytes) {
  return ((bytes ? bytes : 1) + ThreadCaches::kQuantum - 1) & ~(ThreadCaches::kQuantum - 1);
}
std::size_t class_of(std::uint64_t size) { return static_cast<std::size_t>(size / ThreadCaches::kQuantum) - 1; }

std::atomic<std::uint64_t> next_front_id{1};

// Handed-out blocks by address: open addressing, linear probing, backward-shift deletion (as AddressMap).
class HandedMap {
 public:
  struct Entry {
    std::uint64_t addr = 0, requested = 0;
    std::uint32_t size = 0;
    std::uint16_t tag = 0;
  };

  HandedMap() : slots_(kInitialSlots) {}

  const Entry* find(std::uint64_t addr) const {
    for (std::size_t i = home(addr);; i = (i + 1) & mask()) {
      if (slots_[i].addr == addr) return &slots_[i];
      if (slots_[i].addr == 0) return nullptr;
    }
  }
  void insert(const Entry& entry) {
    if ((count_ + 1) * 2 > slots_.size()) grow();
    place(entry);
    ++count_;
  }
  bool erase(std::uint64_t addr, Entry& erased) {
    std::size_t i = home(addr);
    while (slots_[i].addr != addr) {
      if (slots_[i].addr == 0) return false;
      i = (i + 1) & mask();
    }
    erased = slots_[i];
    for (std::size_t j = (i + 1) & mask(); slots_[j].addr != 0; j = (j + 1) & mask()) {
      const std::size_t want = home(slots_[j].addr);
      if ((i <= j) ? (want <= i || want > j) : (want <= i && want > j)) {
        slots_[i] = slots_[j];
        i = j;
      }
    }
    slots_[i] = Entry{};
    --count_;
    return true;
  }

 private:
  static constexpr std::size_t kInitialSlots = 16;
  std::size_t mask() const { return slots_.size() - 1; }
  std::size_t home(std::uint64_t addr) const {
    // The shard took the hash's top bits; the next ones spread the addresses inside the shard.
    const std::uint64_t h = (addr >> 8) * 0x9E3779B97F4A7C15ull;
    return static_cast<std::size_t>((h << std::countr_zero(ThreadCaches::kShards)) >>
                                    (64 - std::countr_zero(slots_.size())));
  }
  void place(const Entry& entry) {
    std::size_t i = home(entry.addr);
    while (slots_[i].addr != 0) i = (i + 1) & mask();
    slots_[i] = entry;
  }
  void grow() {
    std::vector<Entry> old(slots_.size() * 2);
    old.swap(slots_);
    for (const Entry& entry : old)
      if (entry.addr != 0) place(entry);
  }

  std::vector<Entry> slots_;
  std::size_t count_ = 0;
};

}  // namespace

struct alignas(64) ThreadCaches::Shard {
  mutable util::SpinLock lock;
  HandedMap handed PLIMSOLL_GUARDED_BY(lock);
  std::uint64_t bytes PLIMSOLL_GUARDED_BY(lock) = 0;
  std::uint64_t requested PLIMSOLL_GUARDED_BY(lock) = 0;
  std::uint64_t live PLIMSOLL_GUARDED_BY(lock) = 0;
  std::uint64_t allocations PLIMSOLL_GUARDED_BY(lock) = 0;
  std::uint64_t frees PLIMSOLL_GUARDED_BY(lock) = 0;
  std::vector<FrontTagCount> tags PLIMSOLL_GUARDED_BY(lock);

  FrontTagCount& tag(std::uint16_t t) PLIMSOLL_REQUIRES(lock) {
    if (t >= tags.size()) tags.resize(static_cast<std::size_t>(t) + 1);
    return tags[t];
  }
};

class ThreadCache {
 public:
  explicit ThreadCache(ThreadCaches* owner) : owner_(owner) {}

  util::SpinLock lock;

  ThreadCaches* owner() const PLIMSOLL_REQUIRES(lock) { return owner_; }
  void disown() PLIMSOLL_REQUIRES(lock) { owner_ = nullptr; }

  std::uint64_t pop(std::uint64_t size) PLIMSOLL_REQUIRES(lock) {
    std::vector<std::uint64_t>& bin = bins_[class_of(size)];
    if (bin.empty()) return 0;
    const std::uint64_t addr = bin.back();
    bin.pop_back();
    bytes_ -= size;
    --blocks_;
    return addr;
  }
  bool push(std::uint64_t addr, std::uint64_t size, std::uint64_t cap) PLIMSOLL_REQUIRES(lock) {
    std::vector<std::uint64_t>& bin = bins_[class_of(size)];
    if (bytes_ + size > cap || bin.size() >= kDepth) return false;
    if (bin.capacity() == 0) bin.reserve(kDepth);  // once per size: no allocation on later pushes
    bin.push_back(addr);
    bytes_ += size;
    ++blocks_;
    return true;
  }
  /// Moves up to `count` blocks of `size` out of the cache (the oldest: the bin's bottom) into `out`.
  void take(std::uint64_t size, std::size_t count, std::vector<std::uint64_t>& out) PLIMSOLL_REQUIRES(lock) {
    std::vector<std::uint64_t>& bin = bins_[class_of(size)];
    count = std::min(count, bin.size());
    out.insert(out.end(), bin.begin(), bin.begin() + static_cast<std::ptrdiff_t>(count));
    bin.erase(bin.begin(), bin.begin() + static_cast<std::ptrdiff_t>(count));
    bytes_ -= count * size;
    blocks_ -= count;
  }
  /// Adds blocks of `size` the depot handed over (at most kBatch, into an empty bin).
  void refill(std::uint64_t size, const std::uint64_t* addrs, std::size_t count) PLIMSOLL_REQUIRES(lock) {
    std::vector<std::uint64_t>& bin = bins_[class_of(size)];
    if (bin.capacity() == 0) bin.reserve(kDepth);
    bin.insert(bin.end(), addrs, addrs + count);
    bytes_ += count * size;
    blocks_ += count;
  }
  std::vector<std::uint64_t> take_all() PLIMSOLL_REQUIRES(lock) {
    std::vector<std::uint64_t> all;
    all.reserve(blocks_);
    for (std::vector<std::uint64_t>& bin : bins_) {
      all.insert(all.end(), bin.begin(), bin.end());
      bin.clear();
    }
    bytes_ = 0;
    blocks_ = 0;
    return all;
  }
  std::uint64_t bytes() const PLIMSOLL_REQUIRES(lock) { return bytes_; }
  std::size_t held(std::size_t cls) const PLIMSOLL_REQUIRES(lock) { return bins_[cls].size(); }
  std::uint64_t blocks() const PLIMSOLL_REQUIRES(lock) { return blocks_; }

  /// The thread is exiting: its blocks go back to the heap, and the front forgets it.
  void retire() {
    util::SpinGuard guard(lock);
    if (owner_ == nullptr) return;
    const std::vector<std::uint64_t> all = take_all();
    if (!all.empty()) owner_->upstream_.give_back(all);
    owner_->forget(this);
    owner_ = nullptr;
  }

 private:
  ThreadCaches* owner_ PLIMSOLL_GUARDED_BY(lock);
  std::array<std::vector<std::uint64_t>, kClasses> bins_ PLIMSOLL_GUARDED_BY(lock);
  std::uint64_t bytes_ PLIMSOLL_GUARDED_BY(lock) = 0;
  std::uint64_t blocks_ PLIMSOLL_GUARDED_BY(lock) = 0;
};

// Blocks one thread freed and another will allocate (a producer and a consumer of tensors) pass through here in
// batches, so neither takes the device lock per block.
struct ThreadCaches::Depot {
  util::SpinLock lock;
  std::array<std::vector<std::uint64_t>, kClasses> bins PLIMSOLL_GUARDED_BY(lock);
  std::uint64_t bytes PLIMSOLL_GUARDED_BY(lock) = 0;
  std::uint64_t blocks PLIMSOLL_GUARDED_BY(lock) = 0;

  /// Moves the `count` oldest blocks of size class `cls` from `cache` to this depot.
  void accept(ThreadCache& cache, std::size_t cls, std::size_t count) PLIMSOLL_REQUIRES(lock, cache.lock);

  std::vector<std::uint64_t> take_all() PLIMSOLL_REQUIRES(lock) {
    std::vector<std::uint64_t> all;
    for (std::vector<std::uint64_t>& bin : bins) {
      all.insert(all.end(), bin.begin(), bin.end());
      bin.clear();
    }
    bytes = 0;
    blocks = 0;
    return all;
  }
};

void ThreadCaches::Depot::accept(ThreadCache& cache, std::size_t cls, std::size_t count) {
  const std::uint64_t size = (cls + 1) * ThreadCaches::kQuantum;
  std::vector<std::uint64_t>& bin = bins[cls];
  const std::size_t before = bin.size();
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

thread_local ThreadSlots t_slots;
thread_local std::uint64_t t_last_id = 0;
thread_local ThreadCache* t_last = nullptr;
thread_local bool t_exiting = false;  // after ThreadSlots is gone: the front steps aside for this thread

ThreadSlots::~ThreadSlots() {
  t_exiting = true;
  t_last = nullptr;
  t_last_id = 0;
  for (Slot& slot : slots) slot.cache->retire();
}

}  // namespace

ThreadCaches::ThreadCaches(FrontUpstream& upstream, std::uint64_t bytes_per_thread)
    : upstream_(upstream),
      bytes_per_thread_(bytes_per_thread),
      id_(next_front_id.fetch_add(1, std::memory_order_relaxed)),
      shards_(std::make_unique<Shard[]>(kShards)),
      depot_(std::make_unique<Depot>()) {}

ThreadCaches::~ThreadCaches() {
  std::vector<std::shared_ptr<ThreadCache>> caches;
  {
    util::SpinGuard guard(registry_lock_);
    caches.swap(caches_);
  }
  for (const std::shared_ptr<ThreadCache>& cache : caches) {
    util::SpinGuard guard(cache->lock);
    const std::vector<std::uint64_t> all = cache->take_all();
    if (!all.empty()) upstream_.give_back(all);
    cache->disown();
  }
  util::SpinGuard guard(depot_->lock);
  const std::vector<std::uint64_t> all = depot_->take_all();
  if (!all.empty()) upstream_.give_back(all);
}

ThreadCaches::Shard& ThreadCaches::shard_of(std::uint64_t addr) const {
  const std::uint64_t h = (addr >> 8) * 0x9E3779B97F4A7C15ull;
  return shards_[static_cast<std::size_t>(h >> (64 - std::countr_zero(kShards)))];
}

ThreadCache& ThreadCaches::mine() {
  if (t_last_id == id_) return *t_last;
  for (const ThreadSlots::Slot& slot : t_slots.slots) {
    if (slot.front_id == id_) {
      t_last_id = id_;
      t_last = slot.cache.get();
      return *t_last;
    }
  }
  // First use on this thread: drop slots of fronts that are gone, then join this one.
  std::erase_if(t_slots.slots, [](const ThreadSlots::Slot& slot) {
    util::SpinGuard guard(slot.cache->lock);
    return slot.cache->owner() == nullptr;
  });
  auto cache = std::make_shared<ThreadCache>(this);
  {
    util::SpinGuard guard(registry_lock_);
    caches_.push_back(cache);
  }
  t_slots.slots.push_back({id_, cache});
  t_last_id = id_;
  t_last = cache.get();
  return *t_last;
}

void ThreadCaches::forget(const ThreadCache* cache) {
  util::SpinGuard guard(registry_lock_);
  std::erase_if(caches_, [&](const std::shared_ptr<ThreadCache>& c) { return c.get() == cache; });
}

std::uint64_t ThreadCaches::allocate(std::uint64_t bytes, std::uint16_t tag) {
  if (t_exiting) [[unlikely]] return 0;
  const std::uint64_t size = rounded(bytes);
  ThreadCache& cache = mine();
  std::uint64_t addr = 0;
  {
    util::SpinGuard guard(cache.lock);
    addr = cache.pop(size);
    if (addr == 0) [[unlikely]] {
      std::array<std::uint64_t, kBatch> batch;
      std::size_t count = 0;
      {
        util::SpinGuard depot_guard(depot_->lock);
        std::vector<std::uint64_t>& bin = depot_->bins[class_of(size)];
        count = std::min(kBatch, bin.size());
        std::copy(bin.end() - static_cast<std::ptrdiff_t>(count), bin.end(), batch.begin());
        bin.resize(bin.size() - count);
        depot_->bytes -= count * size;
        depot_->blocks -= count;
      }
      cache.refill(size, batch.data(), count);
      addr = cache.pop(size);
    }
  }
  if (addr == 0) addr = upstream_.take_block(size);
  if (addr == 0) return 0;
  Shard& shard = shard_of(addr);
  util::SpinGuard guard(shard.lock);
  shard.handed.insert({addr, bytes, static_cast<std::uint32_t>(size), tag});
  shard.bytes += size;
  shard.requested += bytes;
  ++shard.live;
  ++shard.allocations;
  FrontTagCount& count = shard.tag(tag);
  count.bytes += size;
  ++count.live;
  return addr;
}

bool ThreadCaches::deallocate(std::uint64_t addr, bool keep) {
  HandedMap::Entry entry;
  {
    Shard& shard = shard_of(addr);
    util::SpinGuard guard(shard.lock);
    if (!shard.handed.erase(addr, entry)) return false;
    shard.bytes -= entry.size;
    shard.requested -= entry.requested;
    --shard.live;
    ++shard.frees;
    FrontTagCount& count = shard.tag(entry.tag);
    count.bytes -= entry.size;
    --count.live;
  }
  if (keep && !t_exiting) [[likely]] {
    ThreadCache& cache = mine();
    util::SpinGuard guard(cache.lock);
    if (cache.push(addr, entry.size, bytes_per_thread())) return true;
    // Full. A bin at its depth: its older half goes to the depot. The cache at its bytes: the older half of every
    // bin goes, so sizes the job no longer asks for do not hold the cache forever. A depot past its bytes goes
    // back to the heap whole: what nobody took back since it last emptied is not wanted.
    std::vector<std::uint64_t> to_heap;
    {
      util::SpinGuard depot_guard(depot_->lock);
      const std::size_t cls = class_of(entry.size);
      if (cache.held(cls) >= kDepth) {
        depot_->accept(cache, cls, kBatch);
      } else {
        for (std::size_t c = 0; c < kClasses; ++c) depot_->accept(cache, c, (cache.held(c) + 1) / 2);
      }
      if (depot_->bytes > kDepotPerThread * bytes_per_thread()) to_heap = depot_->take_all();
    }
    if (!to_heap.empty()) upstream_.give_back(to_heap);
    if (cache.push(addr, entry.size, bytes_per_thread())) return true;
  }
  upstream_.give_back({addr});
  return true;
}

bool ThreadCaches::handed_out(std::uint64_t addr, std::uint64_t& requested, std::uint16_t& tag) const {
  const Shard& shard = shard_of(addr);
  util::SpinGuard guard(shard.lock);
  const HandedMap::Entry* entry = shard.handed.find(addr);
  if (entry == nullptr) return false;
  requested = entry->requested;
  tag = entry->tag;
  return true;
}

std::size_t ThreadCaches::flush() {
  std::vector<std::shared_ptr<ThreadCache>> caches;
  {
    util::SpinGuard guard(registry_lock_);
    caches = caches_;
  }
  std::size_t flushed = 0;
  for (const std::shared_ptr<ThreadCache>& cache : caches) {
    // Held while giving back, so an exiting thread or a concurrent flush cannot hand the same blocks back twice.
    util::SpinGuard guard(cache->lock);
    const std::vector<std::uint64_t> all = cache->take_all();
    flushed += all.size();
    if (!all.empty()) upstream_.give_back(all);
  }
  util::SpinGuard guard(depot_->lock);
  const std::vector<std::uint64_t> all = depot_->take_all();
  flushed += all.size();
  if (!all.empty()) upstream_.give_back(all);
  return flushed;
}

FrontTotals ThreadCaches::totals() const {
  FrontTotals totals;
  for (std::size_t i = 0; i < kShards; ++i) {
    const Shard& shard = shards_[i];
    util::SpinGuard guard(shard.lock);
    totals.handed_bytes += shard.bytes;
    totals.handed_requested += shard.requested;
    totals.handed_live += shard.live;
    totals.allocations += shard.allocations;
    totals.frees += shard.frees;
    if (shard.tags.size() > totals.tags.size()) totals.tags.resize(shard.tags.size());
    for (std::size_t t = 0; t < shard.tags.size(); ++t) {
      totals.tags[t].bytes += shard.tags[t].bytes;
      totals.tags[t].live += shard.tags[t].live;
    }
  }
  std::vector<std::shared_ptr<ThreadCache>> caches;
  {
    util::SpinGuard guard(registry_lock_);
    caches = caches_;
  }
  for (const std::shared_ptr<ThreadCache>& cache : caches) {
    util::SpinGuard guard(cache->lock);
    totals.cached_bytes += cache->bytes();
    totals.cached_blocks += cache->blocks();
  }
  util::SpinGuard guard(depot_->lock);
  totals.cached_bytes += depot_->bytes;
  totals.depot_bytes = depot_->bytes;
  totals.cached_blocks += depot_->blocks;
  return totals;
}

}  // namespace plimsoll::engine
