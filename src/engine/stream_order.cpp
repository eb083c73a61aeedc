#include "engine/stream_order.hpp"

#include <algorithm>
#include <cstddef>
#include <new>

#include "util/room_ahead.hpp"

namespace plimsoll::engine {

using backings::EventState;

StreamOrder::StreamOrder(Heap& heap, backings::StreamEvents& events) : heap_(heap), events_(events) {}

StreamOrder::~StreamOrder() {
  for (EventHandle event : free_events_) events_.destroy_event(event);
  for (StreamQueue& queue : queues_)
    for (Batch& batch : queue.batches) events_.destroy_event(batch.event);
  for (CrossParked& entry : cross_)
    for (EventHandle event : entry.events) events_.destroy_event(event);
}

StreamQueue* StreamOrder::find_queue(StreamHandle stream) {
  if (last_queue_ < queues_.size() && queues_[last_queue_].stream == stream) return &queues_[last_queue_];
  for (std::size_t i = 0; i < queues_.size(); ++i) {
    if (queues_[i].stream == stream) {
      last_queue_ = i;
      return &queues_[i];
    }
  }
  return nullptr;
}

StreamQueue& StreamOrder::queue(StreamHandle stream) {
  if (StreamQueue* found = find_queue(stream)) return *found;
  queues_.push_back(StreamQueue{.stream = stream, .batches = {}, .small_fits = {}, .large_fits = {}});
  last_queue_ = queues_.size() - 1;
  return queues_.back();
}

Batch* StreamOrder::find_batch(StreamQueue& queue, std::uint64_t sequence) {
  const auto found = std::lower_bound(queue.batches.begin(), queue.batches.end(), sequence,
                                      [](const Batch& batch, std::uint64_t s) { return batch.sequence < s; });
  return found != queue.batches.end() && found->sequence == sequence ? &*found : nullptr;
}

EventHandle StreamOrder::take_event() noexcept {
  if (!free_events_.empty()) {
    const EventHandle event = free_events_.back();
    free_events_.pop_back();
    return event;
  }
  // The pool's room for every event there is, made before one more is created, so that giving it back (in poll(),
  // inside the noexcept try_allocate) never allocates. Out of host memory: no event, which every caller already
  // survives (the device is synchronized instead).
  try {
    util::reserve_ahead(free_events_, counters_.events_created + 1);  // capacity >= events_created
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
  const EventHandle event = events_.create_event();
  if (event != nullptr) ++counters_.events_created;
  return event;
}

void StreamOrder::give_back_event(EventHandle event) noexcept {
  if (event != nullptr) free_events_.push_back(event);  // never allocates: room made in take_event
}

// Out of host memory, std::bad_alloc with the block not parked and its recorded streams kept, so the caller can
// leave it live and the free can be made again. Every step that allocates has the strong guarantee and runs before
// the ones that cannot be undone; an empty queue or an empty open batch left behind is a valid one.
void StreamOrder::park(const BlockView& block, StreamHandle stream) {
  if (unrecorded_count_ != 0 && take_unrecorded(block.addr)) {  // its streams are unknown: wait for all of them
    if (!extra_streams_.empty()) extra_streams_.erase(block.addr);
    ++counters_.parks;
    free_after_device_sync(block);
    return;
  }
  if (!extra_streams_.empty()) {
    if (const auto found = extra_streams_.find(block.addr); found != extra_streams_.end()) {
      const std::vector<StreamHandle>& streams = found->second;
      if (std::any_of(streams.begin(), streams.end(), [stream](StreamHandle s) { return s != stream; })) {
        park_cross(block, stream, streams);
        extra_streams_.erase(block.addr);
        return;
      }
      extra_streams_.erase(found);  // only the stream it is freed on: an ordinary park, which needs none of them
    }
  }
  StreamQueue& q = queue(stream);
  if (q.batches.empty() || q.batches.back().event != nullptr)
    q.batches.push_back(Batch{.sequence = next_sequence_++, .event = nullptr, .blocks = {}});
  Batch& batch = q.batches.back();
  util::make_room_for(batch.blocks);
  parked_.emplace(block.addr, ParkedBlock{.size = block.size, .stream = stream, .sequence = batch.sequence,
                                          .small = block.small});
  try {
    (block.small ? q.small_fits : q.large_fits).emplace(block.size, block.addr);
  } catch (const std::bad_alloc&) {
    parked_.erase(block.addr);
    throw;
  }
  batch.blocks.push_back(block.addr);  // room made above
  counters_.parked_bytes += block.size;
  ++counters_.parked_blocks;
  ++counters_.parks;
}

// `streams`: the ones recorded for the block, besides `stream` (which they may name too). Out of host memory,
// std::bad_alloc before any event is taken or anything changed.
void StreamOrder::park_cross(const BlockView& block, StreamHandle stream, const std::vector<StreamHandle>& streams) {
  CrossParked entry{.addr = block.addr, .sequence = 0, .events = {}};
  entry.events.reserve(streams.size() + 1);
  util::make_room_for(cross_);
  // Strong guarantee: out of host memory, nothing inserted. Made before any event is taken.
  const auto [parked, inserted] = parked_.emplace(block.addr, ParkedBlock{.size = block.size, .stream = stream,
                                                                          .sequence = 0, .small = block.small,
                                                                          .cross = true});
  (void)inserted;
  ++counters_.parks;
  entry.sequence = next_sequence_++;
  parked->second.sequence = entry.sequence;
  bool recorded = true;
  for (std::size_t i = 0; i <= streams.size() && recorded; ++i) {
    const StreamHandle on = i == 0 ? stream : streams[i - 1];
    if (i > 0 && on == stream) continue;
    const EventHandle event = take_event();
    recorded = event != nullptr && events_.record(event, on);
    if (event != nullptr) entry.events.push_back(event);  // room made above
  }
  if (!recorded) {  // no event for one of its streams: wait for all of them, then the block is idle
    for (EventHandle event : entry.events) give_back_event(event);
    parked_.erase(parked);
    free_after_device_sync(block);
    return;
  }
  cross_.push_back(std::move(entry));  // room made above
  counters_.parked_bytes += block.size;
  ++counters_.parked_blocks;
}

std::uint64_t StreamOrder::reuse(std::uint64_t size, bool small, StreamHandle stream) noexcept {
  if (parked_.empty()) return 0;
  StreamQueue* q = find_queue(stream);
  if (q == nullptr) return 0;
  auto& fits = small ? q->small_fits : q->large_fits;
  const auto found = fits.lower_bound({size, 0});
  if (found == fits.end()) return 0;
  const auto [block_size, addr] = *found;
  const auto parked = parked_.find(addr);
  const std::uint64_t sequence = parked->second.sequence;
  if (block_size > size) {  // the rest stays parked in the same batch, behind the same event
    // The records move to the rest (node handles: no allocation); the batch's room and the heap's split are made
    // first, so out of host memory the block is left parked as it was and the request goes to the heap.
    Batch& batch = *find_batch(*q, sequence);
    try {
      util::make_room_for(batch.blocks);
    } catch (const std::bad_alloc&) {
      return 0;
    }
    const std::uint64_t rest = heap_.split_live(addr, size);
    if (rest == 0) return 0;
    auto fit = fits.extract(found);
    fit.value() = {block_size - size, rest};
    fits.insert(std::move(fit));
    auto record = parked_.extract(parked);
    record.key() = rest;
    record.mapped().size = block_size - size;
    parked_.insert(std::move(record));
    batch.blocks.push_back(rest);
    counters_.parked_bytes -= size;
    ++counters_.reuses;
    return addr;
  }
  fits.erase(found);
  parked_.erase(parked);
  counters_.parked_bytes -= block_size;
  --counters_.parked_blocks;
  ++counters_.reuses;
  return addr;
}

// Two passes: the first checks every parked block overlapping the range (and makes the room the second needs), so
// that a range it cannot free is left exactly as it was; the second frees the parts inside the range, each block's
// books exact after each step. Only a split refused midway (out of host memory) leaves part of the range freed, and
// then the device is synchronized: nothing freed early may still be in use.
bool StreamOrder::unpark_range(std::uint64_t addr, std::uint64_t size, StreamHandle stream) noexcept {
  if (parked_.empty()) return false;
  const std::uint64_t end = addr + size;
  std::vector<std::uint64_t> inside;  // the overlapping blocks' addresses
  try {
    for (const auto& [at, block] : parked_) {
      if (at >= end || at + block.size <= addr) continue;
      // Another stream's block (or one other streams also use) waits for its events: never freed early.
      if (block.cross || block.stream != stream) return false;
      // Freeing the middle of a block would leave two parked parts from one record: kept as it is.
      if (at < addr && at + block.size > end) return false;
      inside.push_back(at);
    }
    if (inside.empty()) return false;
    StreamQueue* q = find_queue(stream);
    for (const std::uint64_t at : inside) {
      const ParkedBlock& block = parked_.find(at)->second;
      if (at >= addr && at + block.size > end) util::make_room_for(find_batch(*q, block.sequence)->blocks);
    }
  } catch (const std::bad_alloc&) {
    return false;  // nothing changed
  }
  StreamQueue& q = *find_queue(stream);
  bool freed_some = false;
  for (const std::uint64_t at : inside) {
    const auto parked = parked_.find(at);
    const ParkedBlock block = parked->second;
    auto& fits = block.small ? q.small_fits : q.large_fits;
    std::uint64_t freed_at = at;
    std::uint64_t freed_size = block.size;
    if (at < addr) {  // the part below the range stays parked, under its record
      freed_at = heap_.split_live(at, addr - at);
      if (freed_at == 0) {
        if (freed_some) settle_unparked();
        return false;
      }
      freed_size = at + block.size - addr;
      if (auto fit = fits.extract({block.size, at}); !fit.empty()) {  // never empty (parked_'s invariant)
        fit.value() = {addr - at, at};
        fits.insert(std::move(fit));
      }
      parked->second.size = addr - at;
      counters_.parked_bytes -= freed_size;
    } else if (at + block.size > end) {  // the part above the range stays parked, its record moved there
      const std::uint64_t rest = heap_.split_live(at, end - at);
      if (rest == 0) {
        if (freed_some) settle_unparked();
        return false;
      }
      freed_size = end - at;
      if (auto fit = fits.extract({block.size, at}); !fit.empty()) {  // never empty (parked_'s invariant)
        fit.value() = {block.size - freed_size, rest};
        fits.insert(std::move(fit));
      }
      auto record = parked_.extract(parked);
      record.key() = rest;
      record.mapped().size = block.size - freed_size;
      parked_.insert(std::move(record));
      find_batch(q, block.sequence)->blocks.push_back(rest);  // room made in the first pass
      counters_.parked_bytes -= freed_size;
    } else {  // wholly inside
      fits.erase({block.size, at});
      parked_.erase(parked);
      counters_.parked_bytes -= block.size;
      --counters_.parked_blocks;
    }
    Heap::Freed freed;
    heap_.deallocate(freed_at, freed);
    ++counters_.released;
    counters_.unparked_bytes += freed_size;
    freed_some = true;
  }
  return true;
}

void StreamOrder::settle_unparked() noexcept {
  ++counters_.fallbacks;
  events_.synchronize_device();
}

void StreamOrder::release(std::uint64_t addr) {
  const auto parked = parked_.find(addr);
  const ParkedBlock block = parked->second;
  parked_.erase(parked);
  if (!block.cross) {
    StreamQueue& q = *find_queue(block.stream);
    (block.small ? q.small_fits : q.large_fits).erase({block.size, addr});
  }
  counters_.parked_bytes -= block.size;
  --counters_.parked_blocks;
  ++counters_.released;
  Heap::Freed freed;
  heap_.deallocate(addr, freed);
}

void StreamOrder::release_batch(StreamQueue& queue, Batch& batch) {
  for (const std::uint64_t addr : batch.blocks) {
    const auto parked = parked_.find(addr);
    if (parked != parked_.end() && !parked->second.cross && parked->second.sequence == batch.sequence &&
        parked->second.stream == queue.stream)
      release(addr);
  }
  give_back_event(batch.event);
}

std::uint64_t StreamOrder::close_batches() {
  for (StreamQueue& q : queues_) {
    if (q.batches.empty() || q.batches.back().event != nullptr) continue;
    Batch& open = q.batches.back();
    const EventHandle event = take_event();
    if (event != nullptr && events_.record(event, q.stream)) {
      open.event = event;
      continue;
    }
    // No event: wait for the whole device; then every block of the batch is idle.
    give_back_event(event);
    ++counters_.fallbacks;
    events_.synchronize_device();
    Batch done = std::move(open);
    q.batches.pop_back();
    release_batch(q, done);
  }
  return next_sequence_;
}

std::size_t StreamOrder::poll() {
  // Nothing parked and nothing queued: the common case costs a few tests. A queue can hold batches whose blocks were
  // all reused (reuse() takes a block out of parked_, not out of its batch); they still end, and give back their
  // events, when their event completes, and a waiter (trim, the destructor, the OOM path) waits for exactly that.
  if (parked_.empty() && cross_.empty() &&
      std::all_of(queues_.begin(), queues_.end(), [](const StreamQueue& q) { return q.batches.empty(); })) {
    return 0;
  }
  const std::uint64_t released_before = counters_.released;
  close_batches();
  for (StreamQueue& q : queues_) {
    while (!q.batches.empty()) {
      // A failed query is a sticky device error: the event will never say done, and no kernel is left to use
      // the blocks either (the context is lost for every stream), so they are released rather than held forever.
      if (events_.query(q.batches.front().event) == EventState::pending) break;
      Batch done = std::move(q.batches.front());
      q.batches.pop_front();
      release_batch(q, done);
    }
  }
  std::erase_if(cross_, [&](CrossParked& entry) {
    for (EventHandle event : entry.events)
      if (events_.query(event) == EventState::pending) return false;
    for (EventHandle event : entry.events) give_back_event(event);
    release(entry.addr);
    return true;
  });
  return counters_.released - released_before;
}

bool StreamOrder::pending_before(std::uint64_t sequence) const {
  for (const StreamQueue& q : queues_)
    if (!q.batches.empty() && q.batches.front().sequence < sequence) return true;
  for (const CrossParked& entry : cross_)
    if (entry.sequence < sequence) return true;
  return false;
}

void StreamOrder::free_after_device_sync(const BlockView& block) noexcept {
  ++counters_.fallbacks;
  events_.synchronize_device();
  Heap::Freed freed;
  heap_.deallocate(block.addr, freed);
  ++counters_.released;
}

bool StreamOrder::take_unrecorded(std::uint64_t addr) noexcept {
  const auto end = unrecorded_.begin() + static_cast<std::ptrdiff_t>(unrecorded_count_);
  const auto found = std::find(unrecorded_.begin(), end, addr);
  if (found == end) return false;
  *found = unrecorded_[--unrecorded_count_];  // unordered: the last one fills the hole
  return true;
}

// PyTorch calls record_stream from code that expects no failure, and a stream left out would let another stream
// reuse the block while its work still runs: so a record that cannot be made (out of host memory) becomes a slot of
// a fixed array instead, whose block's free waits for the whole device. Each step that allocates has the strong
// guarantee, so a failed one leaves the block's books as they were.
bool StreamOrder::record_stream(std::uint64_t addr, StreamHandle stream) noexcept {
  const auto end = unrecorded_.begin() + static_cast<std::ptrdiff_t>(unrecorded_count_);
  if (std::find(unrecorded_.begin(), end, addr) != end) return true;  // every stream is waited for already
  try {
    const auto [found, inserted] = extra_streams_.try_emplace(addr);
    std::vector<StreamHandle>& streams = found->second;
    if (std::find(streams.begin(), streams.end(), stream) != streams.end()) return true;
    try {
      streams.push_back(stream);
    } catch (const std::bad_alloc&) {
      if (inserted) extra_streams_.erase(found);  // no empty record left behind
      throw;
    }
    return true;
  } catch (const std::bad_alloc&) {
    if (unrecorded_count_ == unrecorded_.size()) return false;
    unrecorded_[unrecorded_count_++] = addr;
    ++counters_.unrecorded_streams;
    return true;
  }
}

}  // namespace plimsoll::engine
