#pragma once
// Stream-ordered frees for a CUDA device's Allocator: what libplimsoll_torch_cuda.so puts between PyTorch's
// CUDAPluggableAllocator and plimsoll (docs/pytorch.md).
//
// PyTorch frees a tensor's memory as soon as the host is done with it, while kernels queued on the stream may
// still read or write it. So a free does not reach the Allocator at once: deallocate() records an event on the
// freeing stream and parks (block, event). The block goes back to the Allocator only once the event has
// completed (cuEventQuery says CUDA_SUCCESS), so no later allocation, on any stream, can be handed memory that
// queued work still uses. This is the conservative mode the issue asks for: CUDAPluggableAllocator built from
// Python wires only malloc and free, so record_stream() never reaches plimsoll, and the freeing stream is the
// only stream known to have used the block.
//
// Later work (not done, see docs/pytorch.md): a parked block could be handed at once to an allocation on the
// same stream as its free (stream order makes that safe when only that stream used it), or to any stream after
// cuStreamWaitEvent on its event. Neither is done: the heap has no per-block stream tag to ask for "a free
// block last used by stream S", and reusing a parked block only for a request it fits whole, outside the heap's
// splitting and coalescing, would rarely apply and waste the rest of the block.
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "devices/cuda_driver.hpp"

namespace plimsoll {
class Allocator;
}

namespace plimsoll::torch_cuda {

class StreamOrderedFrees {
 public:
  /// `allocator` and `api` must outlive this. The events are created and recorded on whatever context is
  /// current on the calling thread (PyTorch's, for the device it calls for).
  StreamOrderedFrees(Allocator& allocator, const cuda_driver::Api& api);
  /// Waits for every parked free and gives it back to the allocator, then destroys the pooled events.
  ~StreamOrderedFrees();
  StreamOrderedFrees(const StreamOrderedFrees&) = delete;
  StreamOrderedFrees& operator=(const StreamOrderedFrees&) = delete;

  /// Gives back the parked frees whose events completed (non-blocking), then allocates. When the allocator
  /// refuses, waits for every parked free's event, gives those blocks back and tries again. Returns nullptr
  /// when it still fails; last_error() then holds plimsoll's out-of-memory report, and so does `*why` when
  /// given (last_error() is shared by all threads, `why` is the caller's own). Never throws. When a parked free
  /// had to be waited for, the first refused attempt is counted in the allocator's stats().ooms even if the
  /// retry succeeds. `stream` is not used yet: reuse on the freeing stream without waiting is later work (see
  /// the top of this file).
  void* allocate(std::size_t bytes, cuda_driver::Stream stream, std::string* why = nullptr) noexcept;

  /// Records an event on `stream` and parks `ptr` until it completes. When the driver refuses the event
  /// (create or record fails), waits for the whole context (cuCtxSynchronize) and frees at once: slower, never
  /// unsafe. Returns false, with last_error() set, when the allocator refuses the pointer (not one of its
  /// live blocks); nothing is changed then. `*why`, when given, gets the message of a failure (or of a
  /// fallback to cuCtxSynchronize).
  bool deallocate(void* ptr, cuda_driver::Stream stream, std::string* why = nullptr) noexcept;

  /// Gives back every parked free whose event completed; returns how many. Never blocks on the device.
  std::size_t drain_completed() noexcept;
  /// Waits (polling cuEventQuery with a short yield, without holding the lock, so other threads go on
  /// allocating and freeing) until every free parked before the call completed, and gives each back.
  std::size_t drain_all() noexcept;

  /// Frees parked now (their memory still counts as in use in the allocator's stats).
  std::size_t parked() const;
  /// Events created so far (pooled: a completed free's event is reused by the next free).
  std::size_t events_created() const;
  /// The last failure's message on this object (out-of-memory report, driver error), or empty.
  std::string last_error() const;

 private:
  struct Parked {
    void* ptr = nullptr;
    cuda_driver::Event event = nullptr;
    std::uint64_t sequence = 0;  // the free's number, from next_sequence_
  };

  /// With mutex_ held: gives back the parked frees whose events completed. Never blocks on the device.
  std::size_t drain_locked();
  /// Without mutex_: polls until no free numbered below `sequence` is parked; returns how many it gave back.
  std::size_t wait_for_frees_before(std::uint64_t sequence);
  cuda_driver::Event take_event_locked();
  /// Keeps `message` in last_error_ and copies it to `*why` when given.
  void set_error_locked(std::string message, std::string* why = nullptr) noexcept;

  Allocator& allocator_;
  const cuda_driver::Api& api_;

  mutable std::mutex mutex_;  // guards everything below
  // Invariant: each pointer in parked_ is a live block of allocator_ that its owner freed, recorded behind
  // `event` on the freeing stream, and appears once; it goes to Allocator::deallocate only after cuEventQuery
  // of its event returned CUDA_SUCCESS (or the device failed in a way that left no event to wait on).
  // Parked in free order (increasing sequence), so the oldest (most likely complete) come first.
  std::vector<Parked> parked_;
  std::uint64_t next_sequence_ = 0;  // Invariant: above every parked free's sequence
  std::unordered_set<void*> parked_set_;  // Invariant: exactly the pointers in parked_ (catches double frees)
  // Invariant: events here are created, not referenced by parked_, and complete (or never recorded): free
  // for the next deallocate. Every event ever created is in exactly one of parked_ and free_events_.
  std::vector<cuda_driver::Event> free_events_;
  std::size_t events_created_ = 0;
  std::string last_error_;
};

}  // namespace plimsoll::torch_cuda
