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
//  - When no event can be had (the driver refuses), the device is synchronized and the block freed at once.
// So the heap's free space only ever holds blocks whose streams are done with them, and unmapping cached granules
// needs no wait of its own. Not thread-safe: Allocator holds its lock around every call.
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
  std::uint64_t fallbacks = 0;  // device synchronizations because no event could be had
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
  /// Records the events of open batches and frees into the heap every parked block whose events completed.
  /// Never blocks. Returns how many blocks were freed.
  std::size_t poll();
  /// Closes every open batch (records its event); returns a sequence above every block parked so far.
  std::uint64_t close_batches();
  /// Whether a block parked before `sequence` (from close_batches) is still waiting.
  bool pending_before(std::uint64_t sequence) const;

  /// Adds `stream` to the streams the live block at addr is used on.
  void record_stream(std::uint64_t addr, StreamHandle stream);
  /// The live block at addr is freed without streams: forget the ones recorded for it.
  void forget_streams(std::uint64_t addr) {
    if (!extra_streams_.empty()) extra_streams_.erase(addr);
  }

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
  // Invariant: created, in no batch or cross entry, and complete or never recorded: ready for the next record.
  // Its capacity covers every event created (counters_.events_created), so giving one back never allocates.
  std::vector<EventHandle> free_events_;
  std::uint64_t next_sequence_ = 1;  // Invariant: above every batch's and cross entry's sequence
  StreamOrderCounters counters_;
};

}  // namespace plimsoll::engine
