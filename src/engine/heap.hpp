#pragma once
// The allocation engine: best-fit over segregated bins with immediate coalescing, on one reservation of
// address space whose granules are mapped as blocks first cover them.
//
// Two size classes keep small, short-lived requests from scattering across the large blocks' granules:
//  - large (> small_max): best fit directly in the reservation; the low end fills first, so the top of
//    the reservation stays one free block and the mapped footprint tracks the live bytes;
//  - small (<= small_max): best fit inside small pages (small_page bytes each), which are themselves
//    large blocks; a page that empties goes back to the large class.
// Not thread-safe: plimsoll::Allocator holds the lock.
#include <cstdint>
#include <limits>
#include <string>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "backings/backing.hpp"
#include "engine/address_map.hpp"
#include "engine/block.hpp"
#include "engine/free_bins.hpp"
#include "engine/granule_map.hpp"

namespace plimsoll::engine {

struct HeapOptions {
  std::uint64_t limit = 0;  // most bytes the heap keeps mapped
  bool preallocate = false;  // map the whole limit up front and never give it back
  std::uint64_t release_threshold = std::numeric_limits<std::uint64_t>::max();  // cached bytes kept mapped
  std::uint64_t small_max = 1ull << 20;
  std::uint64_t small_page = 2ull << 20;
  // on_demand reserves this many times the limit in address space: room to place a block elsewhere when
  // the granules of a hole were given back, without ever mapping more than the limit.
  std::uint64_t address_space_factor = 4;
  // When the heap must grow, it maps ahead until the footprint is this many times what it needs (never
  // past the limit): a few map calls in the first steps, then none, at 10% over the live footprint. When
  // one more such step would reach the limit, it maps up to the limit at once.
  double growth_factor = 1.1;
};

// host_memory: the heap's own books (block records, address maps) could not grow; nothing changed (the allocator
// throws std::bad_alloc for it, not an OutOfMemory naming the device).
enum class HeapFailure { none, limit, device, address_space, too_large, paused, occupied, host_memory };

struct HeapCounters {
  std::uint64_t in_use = 0;     // rounded bytes of live allocations
  std::uint64_t requested = 0;  // requested bytes of live allocations
  std::uint64_t peak_in_use = 0;
  std::uint64_t peak_mapped = 0;
  std::uint64_t allocations = 0;
  std::uint64_t frees = 0;
  std::uint64_t maps = 0;
  std::uint64_t unmaps = 0;
};

struct BlockView {
  std::uint64_t addr, size, requested;
  std::uint16_t tag;
  bool free, small, page;
};

class Heap {
 public:
  static constexpr std::uint64_t kQuantum = 1ull << FreeBins::kQuantumShift;

  /// Reserves address space (and maps the whole limit when preallocating). Throws plimsoll::Error when
  /// the backing refuses; OutOfMemory is the caller's to build.
  Heap(backings::Backing& backing, HeapOptions options);
  ~Heap();
  Heap(const Heap&) = delete;
  Heap& operator=(const Heap&) = delete;

  static std::uint64_t round(std::uint64_t bytes) { return ((bytes ? bytes : 1) + kQuantum - 1) & ~(kQuantum - 1); }

  /// Returns the address, or 0 when the request cannot be met even after giving back cached memory
  /// (last_failure() says why).
  // Flattened: the warm path (a best fit in mapped memory, the address map, the counters) runs as one function with
  // no call inside it; growing and giving memory back stay out of line (allocate_large_growing, release_cached).
  [[gnu::flatten]] std::uint64_t allocate(std::uint64_t bytes, std::uint16_t tag);

  /// Places the request exactly at addr (step-aware placement, src/engine/plan_follower.hpp): 0, with nothing
  /// changed, when [addr, addr + round(bytes)) is not inside one free block (HeapFailure::occupied) or its
  /// missing granules cannot be mapped under the limit (HeapFailure::limit; cached granules elsewhere are not
  /// given back for it: the caller falls back to allocate(), which may).
  /// `hint`: the address of a live allocation below addr, near it (0: none), where the search for addr's free
  /// block starts; without one it walks the span from its start.
  std::uint64_t allocate_at(std::uint64_t addr, std::uint64_t bytes, std::uint16_t tag, std::uint64_t hint = 0);
  /// Makes the free memory under `ranges` ((addr, size) pairs, sorted, disjoint) mapped, giving back cached
  /// granules outside them first when the limit requires it. False when they cannot all be mapped under the
  /// limit or the backing refuses one: then nothing stays mapped that was not before (the cached granules given
  /// back to make room stay given back; they held no data).
  /// `keep` (indexed by granule; null: none): cached granules never given back to make room, though not mapped
  /// here either (a transition step's planned ranges, PlanFollower::follow_transition).
  bool map_ranges(const std::vector<std::pair<std::uint64_t, std::uint64_t>>& ranges,
                  const std::vector<bool>* keep = nullptr);

  struct Freed {
    std::uint64_t size = 0, requested = 0;
    std::uint16_t tag = 0;
  };
  /// Frees a live allocation; false, with nothing changed, when addr is not one, or is a live block tagged
  /// `refused_tag` (a tag value, or kNoRefusedTag): the allocator refuses the program's free of a block the
  /// per-thread caches hold (kFrontTag) in the same lookup that finds the block.
  static constexpr std::uint32_t kNoRefusedTag = 0x10000;  // above every 16-bit tag
  [[gnu::flatten]] bool deallocate(std::uint64_t addr, Freed& freed, std::uint32_t refused_tag = kNoRefusedTag);

  // For stream-ordered reuse (src/engine/stream_order.hpp), which keeps freed blocks live in the heap while their
  // streams' work is pending and hands them out again itself. None of these changes placement.

  /// The live block at addr (false when addr is not one).
  bool live_block(std::uint64_t addr, BlockView& view) const;
  /// Whether a small page starts at addr. A page is no entry of the live-block map (its small blocks are), and it
  /// stays until its last small block is freed, whichever of them went first.
  bool small_page_at(std::uint64_t addr) const { return pages_.find(addr) != kNoBlock; }
  /// Sets a live block's requested bytes and tag (a parked block has 0 and 0; a reused one its new request).
  void relabel(std::uint64_t addr, std::uint64_t requested, std::uint16_t tag);
  /// Splits the live block at addr after `keep` bytes (a multiple of kQuantum, below its size): the rest becomes
  /// a live block of its own (requested 0, untagged) in the same span, so it can be freed on its own. Returns
  /// the rest's address. Live bytes are unchanged. Out of host memory for the rest's record, 0 with nothing changed
  /// (it runs inside try_allocate, which is noexcept).
  std::uint64_t split_live(std::uint64_t addr, std::uint64_t keep) noexcept;
  /// Peaks start again from the current values (torch.cuda.reset_peak_memory_stats).
  void reset_peaks();

  /// Unmaps every whole granule that lies inside a free block; returns the bytes given back.
  [[gnu::noinline]] std::uint64_t release_cached();

  // Pause and resume (heap_pause.cpp, docs/engine.md "Pause and resume"). While paused nothing is mapped, every
  // address stays reserved, frees are taken and allocations refused (HeapFailure::paused). `device` names the
  // device in error messages.

  /// Gives cached granules back, copies the rest to host memory when `keep_contents`, then unmaps them. Returns
  /// the bytes unmapped. Throws InvalidState (a preallocated heap, paused already, contents that cannot be kept
  /// on this backing) or Error (host memory or a copy refused); nothing but the cache is given back then.
  std::uint64_t pause(bool keep_contents, std::string_view device);
  /// Throws what pause() would refuse with before it touches anything; returns backing's copier when keep_contents
  /// (else null). Lets several devices paused together find a refusal before any is paused.
  backings::DeviceCopy* check_pausable(bool keep_contents, std::string_view device) const;
  /// Maps back what pause() unmapped, at the same addresses, and copies the contents back. Throws InvalidState
  /// when not paused, PauseError when the memory cannot be mapped again (the device stays paused, contents
  /// kept).
  void resume(std::string_view device);
  bool paused() const { return paused_ != nullptr; }
  /// What resume() maps back (0 when not paused).
  std::uint64_t paused_bytes() const;

  const HeapCounters& counters() const { return counters_; }
  std::uint64_t mapped_bytes() const { return granules_.mapped_bytes(); }
  std::uint64_t live_allocations() const { return live_.size(); }
  /// The largest request that fits in mapped memory without mapping more.
  std::uint64_t largest_free_mapped() const;
  HeapFailure last_failure() const { return failure_; }
  const HeapOptions& options() const { return options_; }
  /// Changes the cached bytes kept mapped past which a free gives them back (HeapOptions::release_threshold). A run
  /// plan lifts it while active (its granules were mapped for the requests to come) and puts it back at its end.
  void set_release_threshold(std::uint64_t bytes) noexcept { options_.release_threshold = bytes; }

  // For the invariant checker and snapshots.
  std::uint64_t base() const { return base_; }
  std::uint64_t span_bytes() const { return span_bytes_; }
  const GranuleMap& granules() const { return granules_; }
  std::uint64_t free_bytes_large() const { return large_bins_.free_bytes(); }
  std::uint64_t free_bytes_small() const { return small_bins_.free_bytes(); }
  template <class Visit>
  void walk(Visit&& visit) const;  // every block of the reservation, then of each small page
  /// Every free block of the reservation (small pages' blocks left out) of at least `min_size` bytes, found through
  /// the free bins: the free blocks only, not a walk of every block.
  template <class Visit>
  void for_each_free_large(std::uint64_t min_size, Visit&& visit) const;
  std::uint64_t find_live(std::uint64_t addr) const { return live_.find(addr) != kNoBlock; }

  /// Empty when every invariant of block.hpp, free_bins.hpp, address_map.hpp and granule_map.hpp holds (the
  /// blocks tile the reservation and each page, free blocks are in their bins once, used blocks in the address map
  /// and mapped, the counters match the blocks, mapped bytes within the limit); else the first one broken. O(heap).
  std::string self_check() const;
  /// self_check(), aborting with the problem. With PLIMSOLL_HEAP_SELF_CHECK (on in sanitizer builds) the heap runs
  /// it every kSelfCheckEvery allocations and frees.
  void verify_now() const;
  static constexpr unsigned kSelfCheckEvery = 1024;

 private:
  friend struct HeapTestAccess;  // tests/engine_self_check_test.cpp breaks invariants on purpose
  BlockIndex allocate_large(std::uint64_t size);
  [[gnu::noinline]] BlockIndex allocate_large_growing(std::uint64_t size);  // the best fit needs granules mapped
  BlockIndex allocate_small(std::uint64_t size);
  std::uint64_t finish_allocation(BlockIndex index, std::uint64_t bytes, std::uint16_t tag);
  BlockIndex free_block_covering(std::uint64_t addr, std::uint64_t size, std::uint64_t hint) const;
  bool map_exactly(std::uint64_t first, std::uint64_t last);
  BlockIndex take(FreeBins& bins, BlockIndex index, std::uint64_t addr, std::uint64_t size);
  struct Placement {
    BlockIndex block = kNoBlock;
    std::uint64_t addr = 0;
  };
  Placement fewest_new_granules(std::uint64_t size) const;
  bool release_cached_outside(const Placement& placement, std::uint64_t size);
  BlockIndex coalesce(FreeBins& bins, BlockIndex index);
  // The most block records one allocation makes: a new small page split out of a free block (2), its span's first
  // record (1), the request split out of the page (2).
  static constexpr std::size_t kRecordsPerAllocation = 5;
  static constexpr std::size_t kInitialRecords = 64;
  /// The books (block records, the live and page address maps) have room for one allocation without allocating:
  /// made before anything changes, so that out of host memory the heap declines (HeapFailure::host_memory) instead
  /// of throwing half way through (try_allocate is noexcept; the block would be lost).
  bool books_ready() noexcept {
    return blocks_.ready(kRecordsPerAllocation) && live_.ready_for_one() && pages_.ready_for_one();
  }
  void free_large(BlockIndex index);
  bool ensure_mapped(const Placement& placement, std::uint64_t size);
  void unmap_range(std::uint64_t first, std::uint64_t count);

  backings::Backing& backing_;
  HeapOptions options_;
  std::uint64_t base_ = 0;
  std::uint64_t span_bytes_ = 0;
  BlockIndex first_block_ = kNoBlock;
  BlockPool blocks_;
  FreeBins large_bins_;
  FreeBins small_bins_;
  AddressMap live_;   // user allocations
  AddressMap pages_;  // small pages: page address -> its large block
  GranuleMap granules_;
  HeapCounters counters_;
  HeapFailure failure_ = HeapFailure::none;
  std::uint64_t mapped_after_release_ = 0;
  unsigned operations_since_check_ = 0;  // PLIMSOLL_HEAP_SELF_CHECK builds only
  void after_operation() {
    if (++operations_since_check_ >= kSelfCheckEvery) {
      operations_since_check_ = 0;
      verify_now();
    }
  }
  struct PausedState;                     // engine/paused_state.hpp
  std::unique_ptr<PausedState> paused_;  // null while running
};

/// Whether the library was built with PLIMSOLL_HEAP_SELF_CHECK.
bool heap_self_check_enabled();

template <class Visit>
void Heap::walk(Visit&& visit) const {
  auto view = [&](const Block& b) { return BlockView{b.addr, b.size, b.requested, b.tag, b.free, b.small, b.page}; };
  for (BlockIndex i = first_block_; i != kNoBlock; i = blocks_[i].next) visit(view(blocks_[i]));
  pages_.for_each([&](std::uint64_t, BlockIndex page) {
    for (BlockIndex i = blocks_[page].span_head; i != kNoBlock; i = blocks_[i].next) visit(view(blocks_[i]));
  });
}

template <class Visit>
void Heap::for_each_free_large(std::uint64_t min_size, Visit&& visit) const {
  large_bins_.for_each(blocks_, [&](BlockIndex i) {
    const Block& b = blocks_[i];
    if (b.size >= min_size) visit(BlockView{b.addr, b.size, b.requested, b.tag, b.free, b.small, b.page});
  });
}

}  // namespace plimsoll::engine
