#pragma once
// Pinned (page-locked) host memory for the cpu-pinned device: the host backing's granules, each registered with
// cuMemHostRegister when mapped and unregistered before it is unmapped, so that copies between them and a GPU run
// as DMA, asynchronously on a stream. Page-locked memory cannot be swapped or reclaimed, so the device has a limit
// of its own (docs/cuda.md, "Pinned host memory"). Copies from it are queued on streams, so the backing offers the
// CUDA context's events: the engine's stream-ordered reuse keeps a buffer whose copy is pending from being reused.
#include <cstdint>
#include <memory>
#include <string>

#include "backings/backing_adaptor.hpp"
#include "backings/cuda_context.hpp"
#include "backings/cuda_leaf_locks.hpp"
#include "backings/cuda_stream_events.hpp"
#include "backings/granules.hpp"
#include "backings/host_backing.hpp"
#include "devices/cuda_driver.hpp"

namespace plimsoll::backings {

class PinnedHostBacking final : public OwningBackingAdaptor {
 public:
  /// `api` must outlive this; `device` is the GPU whose primary context registers the memory (portable: pinned for
  /// every context). Throws DeviceUnavailable when the driver lacks cuMemHostRegister or refuses the context.
  PinnedHostBacking(const cuda_driver::Api& api, cuda_driver::Device device, std::uint64_t capacity_bytes,
                    std::uint64_t granularity = kDefaultGranularity);

  std::string last_driver_error() const;

 private:
  /// Maps the host granules, then registers each; all or nothing: false, with nothing left mapped or registered,
  /// when the host or the driver refuses (the driver's error is kept in last_driver_error()).
  bool do_map(std::uintptr_t addr, std::uint64_t bytes) override;
  /// Unregisters each granule, then unmaps. Waits for the whole device first only after a free without a stream
  /// (a copy queued before it may still read the memory).
  void do_unmap(std::uintptr_t addr, std::uint64_t bytes) noexcept override;
  std::string do_describe() const override;
  StreamEvents* do_stream_events() noexcept override { return leaves_.events.get(); }
  /// fork(): the error's lock (last_driver_error() takes it without the backing's lock), then the events'.
  void do_lock_own_for_fork() noexcept override { leaves_.lock_for_fork(); }
  void do_unlock_own_after_fork() noexcept override { leaves_.unlock_after_fork(); }

  const cuda_driver::Api& api_;
  const CudaPrimaryContext context_;
  CudaLeafLocks leaves_;  // after context_, which its events use; the error is read outside the backing's lock
};

}  // namespace plimsoll::backings
