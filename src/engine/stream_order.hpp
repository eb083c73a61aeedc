#pragma once
// Stream-ordered reuse (docs/engine.md, "CUDA backings and streams"): what Allocator puts in front of the heap
// on a device whose backing has StreamEvents. The heap stays stream-agnostic.
//
//  - A block freed on stream S is parked: it stays live in the heap, in S's open batch, with no driver call.
//  - An allocation on S may take a parked block of S at once (best fit in its size class, the rest split off
//    and parked), since S's later work runs after the work that used it.
//  - Each poll (every allocation on the device) records one event per stream with an open batch, and frees into
//    the heap, for every stream, the batches whose events completed (cuEventQuery; never blocks).
//  - record_stream(ptr, T) adds a stream: such a block waits for an event on each of its streams, recorded at
//    its free, and nobody takes it before they completed.
//  - A run plan's request on S whose planned range holds blocks parked on S (only on S) takes those bytes at once
//    (unpark_range), for the same reason; a block parked on another stream keeps its range until its events.
//  - When no event can be had (the driver refuses), the device is synchronized and the block freed at once.
//  - When record_stream cannot make its record (out of host memory), the block is noted in a fixed set made ahead
//    (no allocation) and treated the same way at its free: the device is synchronized and the block freed at once.
// So the heap's free space only ever holds blocks whose streams are done with them, and unmapping cached granules
// needs no wait of its own. Not thread-safe: Allocator holds its lock around every call.
#include <array>
#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "engine/heap.hpp"
#include "engine/parked_blocks.hpp"

namespace plimsoll::engine {

struct StreamOrderCounters {
  std::uint64_t parked_bytes = 0;  // rounded bytes of parked blocks (live in the heap, free for the program)
  std::uint64_t parked_blocks = 0;
  std::uint64_t parks = 0;     // frees on a stream
  std::uint64_t reuses = 0;    // allocations served from a parked block
  std::uint64_t released = 0;  // parked blocks (split parts included) freed into the heap
  std::uint64_t events_created = 0;
  std::uint64_t fallbacks = 0;  // device synchronizations: no event could be had, or an unrecorded block's free
  std::uint64_t unrecorded_streams = 0;  // record_stream calls out of host memory, kept in the fixed slots
  std::uint64_t unparked_bytes = 0;  // bytes unpark_range freed for a run plan's request on the parking stream
};

class StreamOrder {
 public:
  StreamOrder(Heap& heap, backings::StreamEvents& events);
  /// Destroys every event. Parked blocks must have been released first (Allocator waits for them).
  ~StreamOrder();
  StreamOrder(const StreamOrder&) = delete;
  StreamOrder& operator=(const StreamOrder&) = delete;

  bool is_parked(std::uint64_t addr) const { return !parked_.empty() && parked_.count(addr) != 0; }
  bool empty() const { return parked_.empty(); }

  /// Parks the live, not parked block `block` freed on `stream`. Out of host memory, std::bad_alloc with the block
  /// not parked (still live for the program) and its recorded streams kept. With a recorded stream and no event to
  /// be had, the device is synchronized and the block freed into the heap at once: relabel it before, not after.
  void park(const BlockView& block, StreamHandle stream);
  /// A block parked on `stream` for `size` rounded bytes of class `small` (best fit; the rest split off and
  /// parked), taken out of the parked set; 0 when there is none, or when the split's books cannot be made (out of
  /// host memory: nothing changed). Allocates nothing otherwise: it runs inside the noexcept try_allocate.
  std::uint64_t reuse(std::uint64_t size, bool small, StreamHandle stream) noexcept;
  /// For a run plan's request on `stream` whose planned range [addr, addr + size) holds parked blocks: frees into the
  /// heap the parts of them inside the range, when every parked block overlapping it was parked on `stream` itself
  /// (not cross): the stream's later work runs after the work that used them, as for reuse(). Parts outside the
  /// range stay parked, behind the same event. A block parked on another stream (or cross), or one overlapping
  /// both ends of the range, keeps the whole range as it is: false, nothing changed. Also false when nothing
  /// overlaps. Allocates nothing that can fail it (out of host memory: false, the device synchronized when some
  /// part was freed already). The caller places its request in the range at once, or calls settle_unparked().
  bool unpark_range(std::uint64_t addr, std::uint64_t size, StreamHandle stream) noexcept;
  /// After unpark_range(), when the request could not be placed there after all: what was freed into the heap
  /// early may still be used by `stream`'s queued work, and now any stream may take it, so waits for the device.
  void settle_unparked() noexcept;
  /// Records the events of open batches and frees into the heap every parked block whose events completed.
  /// Never blocks. Returns how many blocks were freed.
  std::size_t poll();
  /// Closes every open batch (records its event); returns a sequence above every block parked so far.
  std::uint64_t close_batches();
  /// Whether a block parked before `sequence` (from close_batches) is still waiting.
  bool pending_before(std::uint64_t sequence) const;

  /// Adds `stream` to the streams the live block at addr is used on. Allocates nothing that can fail it: out of host
  /// memory the block is noted among kUnrecordedSlots blocks whose free synchronizes the device instead (as safe,
  /// only slower). False, with nothing changed, only when its record cannot be made and every slot is taken.
  [[nodiscard]] bool record_stream(std::uint64_t addr, StreamHandle stream) noexcept;
  /// The live block at addr is freed without streams: forget the ones recorded for it.
  void forget_streams(std::uint64_t addr) noexcept {
    if (!extra_streams_.empty()) extra_streams_.erase(addr);
    if (unrecorded_count_ != 0) take_unrecorded(addr);
  }

  /// Blocks whose streams record_stream could not record (out of host memory), at most this many at once.
  static constexpr std::size_t kUnrecordedSlots = 64;

  const StreamOrderCounters& counters() const { return counters_; }

 private:
  StreamQueue* find_queue(StreamHandle stream);
  StreamQueue& queue(StreamHandle stream);
  Batch* find_batch(StreamQueue& queue, std::uint64_t sequence);
  EventHandle take_event() noexcept;
  void give_back_event(EventHandle event) noexcept;
  /// Frees the block parked at addr into the heap.
  void release(std::uint64_t addr);
  void release_batch(StreamQueue& queue, Batch& batch);
  void park_cross(const BlockView& block, StreamHandle stream, const std::vector<StreamHandle>& streams);
  /// Whether addr was among the unrecorded blocks (and takes it out).
  bool take_unrecorded(std::uint64_t addr) noexcept;
  /// Waits for the whole device, then frees the live block into the heap: it is idle on every stream.
  void free_after_device_sync(const BlockView& block) noexcept;

  Heap& heap_;
  backings::StreamEvents& events_;
  // Invariant: exactly the parked blocks; each is a live heap block of that size, in its stream's queue (in the
  // batch of its sequence) or in cross_, and in its queue's fits set unless cross.
  std::unordered_map<std::uint64_t, ParkedBlock> parked_;
  std::vector<StreamQueue> queues_;  // few streams: searched linearly, the last one used first
  std::size_t last_queue_ = 0;
  std::vector<CrossParked> cross_;
  // Streams recorded on live blocks with record_stream, beside the stream they will be freed on.
  std::unordered_map<std::uint64_t, std::vector<StreamHandle>> extra_streams_;
  // Live blocks used on streams that record_stream could not note (out of host memory): their first
  // unrecorded_count_ entries, unordered. A fixed array, so noting one never allocates.
  std::array<std::uint64_t, kUnrecordedSlots> unrecorded_{};
  std::size_t unrecorded_count_ = 0;
  // Invariant: created, in no batch or cross entry, and complete or never recorded: ready for the next record.
  // Its capacity covers every event created (counters_.events_created), so giving one back never allocates.
  std::vector<EventHandle> free_events_;
  std::uint64_t next_sequence_ = 1;  // Invariant: above every batch's and cross entry's sequence
  StreamOrderCounters counters_;
};

}  // namespace plimsoll::engine
