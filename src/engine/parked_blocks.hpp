#pragma once
// The records of stream-ordered reuse (src/engine/stream_order.hpp): blocks a program freed on a stream whose
// queued work may still use them. A parked block stays a live block of the heap (so nothing else can be placed
// over it) until its events complete; then it is freed into the heap's bins for every stream.
#include <cstdint>
#include <deque>
#include <set>
#include <utility>
#include <vector>

#include "backings/stream_events.hpp"

namespace plimsoll::engine {

using backings::EventHandle;
using backings::StreamHandle;

struct ParkedBlock {
  std::uint64_t size = 0;      // the heap block's (rounded) size
  StreamHandle stream = nullptr;  // the stream it was freed on
  std::uint64_t sequence = 0;  // the batch (or cross entry) whose events it waits for
  bool small = false;          // the heap's small class: reused only for small requests, large for large
  bool cross = false;          // also used on other streams (record_stream): reused by nobody before its events
};

/// The frees of one stream between two polls, behind one event: events on one stream complete in order, so
/// one event recorded after the last free covers them all, and the frees cost no driver call of their own.
struct Batch {
  std::uint64_t sequence = 0;
  EventHandle event = nullptr;  // nullptr: open (frees join it); recorded at the next poll, then closed
  // The blocks parked into it. A block reused (or re-parked) since is still named here; the parked map says
  // whether the name is current (same sequence), so reuse never has to search a batch.
  std::vector<std::uint64_t> blocks;
};

/// One stream's parked blocks.
/// Invariants: `batches` are in increasing sequence; only the back may be open; every closed batch has an event.
/// `small_fits`/`large_fits` hold (size, address) of exactly the blocks parked on this stream that are not
/// cross, by class: the ones the stream itself may take at once (its own later work runs after the free).
struct StreamQueue {
  StreamHandle stream = nullptr;
  std::deque<Batch> batches;
  std::set<std::pair<std::uint64_t, std::uint64_t>> small_fits;
  std::set<std::pair<std::uint64_t, std::uint64_t>> large_fits;
};

/// A block used on more streams than the one it was freed on: one event per stream, recorded at the free.
struct CrossParked {
  std::uint64_t addr = 0;
  std::uint64_t sequence = 0;
  std::vector<EventHandle> events;  // Invariant: all recorded; the block is released when every one completed
};

}  // namespace plimsoll::engine
