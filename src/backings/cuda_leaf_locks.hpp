#pragma once
// What a CUDA backing keeps beside its backing lock for readers that do not take it: its stream events (the
// engine's polls) and its last driver error (last_driver_error()). Both locks are leaves a hook may take under the
// backing's lock, so fork() takes them from the backing's Backing::do_lock_own_for_fork, after the backing's lock
// and its upstream's, and releases them before (docs/engine.md, "fork()", step 4). One member for every CUDA backing
// with events and an error note (virtual memory, pinned host memory, the cuMemAlloc region), so the order is written
// once.
#include <memory>
#include <utility>

#include "backings/cuda_stream_events.hpp"
#include "backings/driver_error_note.hpp"

namespace plimsoll::backings {

struct CudaLeafLocks {
  /// `events` nullptr when the driver lacks them; `label` and `consequence` as DriverErrorNote's.
  CudaLeafLocks(std::unique_ptr<CudaStreamEvents> device_events, const char* label, const char* consequence)
      : events(std::move(device_events)), error(label, consequence) {}

  /// The error's lock, then the events'.
  void lock_for_fork() noexcept {
    error.lock_for_fork();
    if (events != nullptr) events->lock_for_fork();
  }
  void unlock_after_fork() noexcept {
    if (events != nullptr) events->unlock_after_fork();
    error.unlock_after_fork();
  }

  const std::unique_ptr<CudaStreamEvents> events;
  DriverErrorNote error;
};

}  // namespace plimsoll::backings
