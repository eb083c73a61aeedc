#pragma once
// Pinned (page-locked) host memory for the cpu-pinned device: the host backing's granules, each registered with
// cuMemHostRegister when mapped and unregistered before it is unmapped, so that copies between them and a GPU run
// as DMA, asynchronously on a stream. Page-locked memory cannot be swapped or reclaimed, so the device has a limit
// of its own (docs/cuda.md, "Pinned host memory"). Copies from it are queued on streams, so the backing offers the
// CUDA context's events: the engine's stream-ordered reuse keeps a buffer whose copy is pending from being reused.
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "backings/backing.hpp"
#include "backings/cuda_context.hpp"
#include "backings/cuda_stream_events.hpp"
#include "backings/granules.hpp"
#include "backings/host_backing.hpp"
#include "devices/cuda_driver.hpp"

namespace plimsoll::backings {

class PinnedHostBacking final : public Backing {
 public:
  /// `api` must outlive this; `device` is the GPU whose primary context registers the memory (portable: pinned for
  /// every context). Throws DeviceUnavailable when the driver lacks cuMemHostRegister or refuses the context.
  PinnedHostBacking(const cuda_driver::Api& api, cuda_driver::Device device, std::uint64_t capacity_bytes,
                    std::uint64_t granularity = kDefaultGranularity);

  std::uintptr_t reserve(std::uint64_t bytes) override { return host_.reserve(bytes); }
  void unreserve(std::uintptr_t base, std::uint64_t bytes) noexcept override { host_.unreserve(base, bytes); }
  /// Maps the host granules, then registers each; all or nothing: false, with nothing left mapped or registered,
  /// when the host or the driver refuses (the driver's error is kept in last_driver_error()).
  bool map(std::uintptr_t addr, std::uint64_t bytes) override;
  /// Unregisters each granule, then unmaps. Waits for the whole device first only after a free without a stream
  /// (a copy queued before it may still read the memory).
  void unmap(std::uintptr_t addr, std::uint64_t bytes) noexcept override;

  std::uint64_t granularity() const noexcept override { return host_.granularity(); }
  BackingMemory memory() const override { return host_.memory(); }
  HostPages host_pages() const override { return host_.host_pages(); }
  bool touchable() const noexcept override { return true; }
  std::string describe() const override;
  StreamEvents* stream_events() noexcept override { return events_.get(); }

  std::string last_driver_error() const;

 private:
  const cuda_driver::Api& api_;
  HostBacking host_;
  const CudaPrimaryContext context_;
  const std::unique_ptr<CudaStreamEvents> events_;  // after context_, which it uses
  mutable std::mutex mutex_;
  std::string last_driver_error_;  // guarded by mutex_
};

}  // namespace plimsoll::backings
