#pragma once
// StreamEvents over the CUDA driver: cuEventCreate(CU_EVENT_DISABLE_TIMING), cuEventRecord, cuEventQuery, and
// cuCtxSynchronize as the fallback, each in the device's primary context (pushed around the call, so the
// caller's own context stays as it was). Thread-safe: the driver calls are, and the rest is atomics and a
// mutex around the last error.
#include <atomic>
#include <string>

#include "backings/cuda_context.hpp"
#include "backings/driver_error_note.hpp"
#include "backings/stream_events.hpp"
#include "devices/cuda_driver.hpp"

namespace plimsoll::backings {

class CudaStreamEvents final : public StreamEvents {
 public:
  /// `api` (with has_events()) and `context` must outlive this.
  CudaStreamEvents(const cuda_driver::Api& api, const CudaPrimaryContext& context);

  EventHandle create_event() noexcept override;
  void destroy_event(EventHandle event) noexcept override;
  bool record(EventHandle event, StreamHandle stream) noexcept override;
  EventState query(EventHandle event) noexcept override;
  void synchronize_device() noexcept override;
  void note_unordered_free() noexcept override { unordered_frees_.store(true); }
  std::string last_error() const override;

  /// For the backing's unmap: true (and cleared) when a block was freed without its streams since the last
  /// call, so the unmap must wait for the whole device first. Clearing before the wait is right: the wait
  /// covers every free noted before it.
  bool take_unordered_frees() noexcept { return unordered_frees_.exchange(false); }

  /// fork(): the error's lock (a leaf: last_error() takes it without the device lock), from the owning backing's
  /// Backing::do_lock_own_for_fork.
  void lock_for_fork() const noexcept { error_.lock_for_fork(); }
  void unlock_after_fork() const noexcept { error_.unlock_after_fork(); }

 private:
  /// Pushes the context; false (with the error kept) when the driver refuses.
  bool push(const char* operation) noexcept;
  void pop() noexcept;
  void fail(const char* call, cuda_driver::Result result) noexcept;

  const cuda_driver::Api& api_;
  const CudaPrimaryContext& context_;
  std::atomic<bool> unordered_frees_{false};
  DriverErrorNote error_{"", "waiting for the whole device instead"};
};

}  // namespace plimsoll::backings
