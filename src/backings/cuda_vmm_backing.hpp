#pragma once
// A GPU's memory through CUDA virtual memory management: the growable segment. reserve() takes address space
// with cuMemAddressReserve; map() backs it granule by granule, each granule its own cuMemCreate allocation,
// mapped with cuMemMap and made readable and writable with cuMemSetAccess; unmap() gives granules back with
// cuMemUnmap + cuMemRelease. One allocation per granule because cuMemUnmap cannot unmap part of a mapping:
// the heap unmaps whatever granules it trims, in any grouping, and only per-granule mappings allow that.
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "backings/backing.hpp"
#include "backings/cuda_context.hpp"
#include "backings/cuda_device_copy.hpp"
#include "backings/cuda_stream_events.hpp"
#include "backings/mapping_ledger.hpp"
#include "devices/cuda_driver.hpp"

namespace plimsoll::backings {

class CudaVmmBacking final : public Backing {
 public:
  /// `device`: the driver's CUdevice (numbered as the driver sees them, after CUDA_VISIBLE_DEVICES, not
  /// plimsoll's cuda:N). `api` must outlive this. Throws DeviceUnavailable when the device cannot use virtual
  /// memory management (cuda_driver::vmm_unsupported_reason) or the driver refuses the context or the
  /// granularity query.
  CudaVmmBacking(const cuda_driver::Api& api, cuda_driver::Device device);
  /// Gives back what the engine left mapped or reserved (a heap normally leaves nothing).
  ~CudaVmmBacking() override;
  CudaVmmBacking(const CudaVmmBacking&) = delete;
  CudaVmmBacking& operator=(const CudaVmmBacking&) = delete;

  /// cuMemAddressReserve aligned to the granularity; 0 when the driver refuses.
  std::uintptr_t reserve(std::uint64_t bytes) override;
  /// Aborts when [base, bytes) is not a reservation or still has mapped granules (cuMemAddressFree refuses).
  void unreserve(std::uintptr_t base, std::uint64_t bytes) noexcept override;
  /// All or nothing: false when a granule cannot be mapped, after unmapping and releasing the granules this
  /// call had mapped. Out of memory (cuMemCreate) is the expected cause; any other driver failure is rolled
  /// back the same way and also returns false (the heap handles a refused map, and Allocator::try_allocate
  /// is noexcept, so nothing may be thrown), but is kept in last_driver_error() and said once on stderr, so
  /// that the out-of-memory report that follows is not the only trace of it. Throws std::logic_error on a
  /// misaligned or already mapped range (an engine bug, caught before any driver call).
  bool map(std::uintptr_t addr, std::uint64_t bytes) override;
  /// Waits for the device's streams (cuCtxSynchronize: a kernel queued before a block was freed may still
  /// use it), then unmaps and releases each granule. Aborts on a range not entirely mapped.
  void unmap(std::uintptr_t addr, std::uint64_t bytes) noexcept override;

  std::uint64_t granularity() const noexcept override { return granularity_; }
  /// cuMemGetInfo: the whole device, other processes' use included.
  BackingMemory memory() const override;
  bool touchable() const noexcept override { return false; }
  /// The device's events (nullptr when the driver lacks them): blocks freed on a stream wait for their own
  /// events instead of the whole device.
  StreamEvents* stream_events() noexcept override { return events_.get(); }  // device memory: the host cannot dereference it
  std::string describe() const override;
  /// Through the driver (cuMemcpyDtoH/HtoD); nullptr when it lacks the copy calls.
  DeviceCopy* device_copy() noexcept override { return copy_.get(); }

  std::uint64_t mapped_bytes() const noexcept { return mapped_bytes_.load(); }
  /// The last map() failure other than out of memory ("cuMemSetAccess of ... failed: ..."), or empty.
  std::string last_driver_error() const;

 private:
  /// cuMemCreate + cuMemMap + cuMemSetAccess of the granule at `addr`, undoing its own steps on failure.
  /// Returns the failed call's result (kSuccess when mapped) and names the call in `failed_call`.
  cuda_driver::Result map_granule(std::uintptr_t addr, const char*& failed_call);
  /// cuMemUnmap + cuMemRelease of a granule map_granule mapped; aborts if the driver refuses.
  void unmap_granule(std::uintptr_t addr) noexcept;

  const cuda_driver::Api& api_;
  const CudaPrimaryContext context_;
  const std::unique_ptr<CudaStreamEvents> events_;  // after context_, which it uses
  const std::unique_ptr<CudaDeviceCopy> copy_;       // after context_, which it uses
  const cuda_driver::MemAllocationProp prop_;  // pinned memory on this device, no export handle
  const std::uint64_t granularity_;            // recommended granularity, at least the minimum; a power of two
  mutable std::mutex mutex_;                   // the runtime may share one backing between logical devices
  MappingLedger ledger_;
  // Invariant: a granule's address is a key exactly when the ledger records it mapped, i.e. its cuMemCreate
  // allocation is mapped there and accessible. The value is that allocation, to release at unmap.
  std::unordered_map<std::uintptr_t, cuda_driver::MemHandle> handles_;
  std::atomic<std::uint64_t> mapped_bytes_{0};  // == handles_.size() * granularity_, readable without the lock
  std::string last_driver_error_;               // guarded by mutex_
};

}  // namespace plimsoll::backings
