#include "integrations/torch_cuda/stream_ordered_frees.hpp"

#include <chrono>
#include <cstdint>
#include <exception>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "plimsoll/allocator.hpp"

namespace plimsoll::torch_cuda {

namespace cu = cuda_driver;

StreamOrderedFrees::StreamOrderedFrees(Allocator& allocator, const cu::Api& api) : allocator_(allocator), api_(api) {}

StreamOrderedFrees::~StreamOrderedFrees() {
  try {
    wait_for_frees_before(UINT64_MAX);
  } catch (...) {  // formatting an error message ran out of host memory: the blocks stay with the allocator
  }
  const std::lock_guard lock(mutex_);
  for (cu::Event event : free_events_) api_.event_destroy(event);
}

void StreamOrderedFrees::set_error_locked(std::string message, std::string* why) noexcept {
  try {
    if (why != nullptr) *why = message;
  } catch (...) {  // no host memory for a copy: the shared last_error_ still has it
  }
  last_error_ = std::move(message);
}

std::size_t StreamOrderedFrees::drain_locked() {
  std::size_t freed = 0;
  std::size_t kept = 0;
  for (std::size_t i = 0; i < parked_.size(); ++i) {
    const Parked entry = parked_[i];
    const cu::Result result = api_.event_query(entry.event);
    if (result == cu::kErrorNotReady) {
      parked_[kept++] = entry;  // stable: parked_ stays in free order
      continue;
    }
    if (result != cu::kSuccess) {
      // A sticky device error: the event will never say done. The context is lost for every stream, so no
      // kernel is left to use the block either; give it back rather than hold it forever, and say why.
      set_error_locked(
          fmt::format("cuEventQuery failed: {}; freeing the block without waiting", api_.error_name(result)));
    }
    parked_set_.erase(entry.ptr);
    free_events_.push_back(entry.event);
    try {
      allocator_.deallocate(entry.ptr);
    } catch (const std::exception& error) {  // cannot happen: deallocate() checked owns() before parking
      set_error_locked(error.what());
    }
    ++freed;
  }
  parked_.resize(kept);
  return freed;
}

std::size_t StreamOrderedFrees::wait_for_frees_before(std::uint64_t sequence) {
  std::size_t freed = 0;
  for (std::size_t polls = 0;; ++polls) {
    {
      const std::lock_guard lock(mutex_);
      freed += drain_locked();
      if (parked_.empty() || parked_.front().sequence >= sequence) return freed;
    }
    // Device work takes microseconds to milliseconds: spin politely first, then sleep in short steps.
    if (polls < 64) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

cu::Event StreamOrderedFrees::take_event_locked() {
  if (!free_events_.empty()) {
    const cu::Event event = free_events_.back();
    free_events_.pop_back();
    return event;
  }
  cu::Event event = nullptr;
  const cu::Result result = api_.event_create(&event, cu::kEventDisableTiming);
  if (result != cu::kSuccess) {
    set_error_locked(fmt::format("cuEventCreate failed: {}", api_.error_name(result)));
    return nullptr;
  }
  ++events_created_;
  return event;
}

void* StreamOrderedFrees::allocate(std::size_t bytes, cu::Stream /*stream*/, std::string* why) noexcept {
  bool had_parked = false;
  std::uint64_t parked_before = 0;
  try {
    const std::lock_guard lock(mutex_);
    drain_locked();
    had_parked = !parked_.empty();
    parked_before = next_sequence_;
  } catch (...) {
    // bad_alloc while formatting a message: carry on, the allocation below reports for itself.
  }
  if (had_parked) {
    if (void* ptr = allocator_.try_allocate(bytes)) return ptr;
    // Before reporting out of memory: wait for the parked frees' events, give them back, retry.
    try {
      wait_for_frees_before(parked_before);
    } catch (...) {
    }
  }
  // The last attempt throws so that plimsoll's full report (what is held, by whom, the fix) is kept.
  try {
    return allocator_.allocate(bytes);
  } catch (const std::exception& error) {  // OutOfMemory, or anything else the allocator threw
    const std::lock_guard lock(mutex_);
    try {
      set_error_locked(error.what(), why);
    } catch (...) {
    }
  }
  return nullptr;
}

bool StreamOrderedFrees::deallocate(void* ptr, cu::Stream stream, std::string* why) noexcept {
  try {
    const std::lock_guard lock(mutex_);
    if (ptr == nullptr) return true;
    if (parked_set_.count(ptr) != 0 || !allocator_.owns(ptr)) {
      set_error_locked(fmt::format("invalid free of {}: not a live block of {} (freed twice, or never allocated "
                                   "here)",
                                   fmt::ptr(ptr), allocator_.description().name),
                       why);
      return false;
    }
    cu::Event event = take_event_locked();
    if (event != nullptr) {
      const cu::Result result = api_.event_record(event, stream);
      if (result == cu::kSuccess) {
        parked_.push_back({ptr, event, next_sequence_++});
        parked_set_.insert(ptr);
        return true;
      }
      free_events_.push_back(event);  // never recorded, so complete: reusable
      set_error_locked(fmt::format("cuEventRecord failed: {}; waiting for the whole context (cuCtxSynchronize) "
                                   "before freeing",
                                   api_.error_name(result)),
                       why);
    }
    // No event: wait for all of the context's work instead, then the block is idle everywhere.
    const cu::Result synced = api_.ctx_synchronize();
    if (synced != cu::kSuccess) {
      set_error_locked(fmt::format("{}; cuCtxSynchronize failed too: {}", last_error_, api_.error_name(synced)),
                       why);
    }
    allocator_.deallocate(ptr);
    return true;
  } catch (const std::exception& error) {
    try {
      const std::lock_guard lock(mutex_);
      set_error_locked(error.what(), why);
    } catch (...) {
    }
    return false;
  }
}

std::size_t StreamOrderedFrees::drain_completed() noexcept {
  try {
    const std::lock_guard lock(mutex_);
    return drain_locked();
  } catch (...) {
    return 0;
  }
}

std::size_t StreamOrderedFrees::drain_all() noexcept {
  try {
    std::uint64_t sequence = 0;
    {
      const std::lock_guard lock(mutex_);
      sequence = next_sequence_;
    }
    return wait_for_frees_before(sequence);
  } catch (...) {
    return 0;
  }
}

std::size_t StreamOrderedFrees::parked() const {
  const std::lock_guard lock(mutex_);
  return parked_.size();
}

std::size_t StreamOrderedFrees::events_created() const {
  const std::lock_guard lock(mutex_);
  return events_created_;
}

std::string StreamOrderedFrees::last_error() const {
  const std::lock_guard lock(mutex_);
  return last_error_;
}

}  // namespace plimsoll::torch_cuda
