#pragma once
// A GPU's memory through CUDA virtual memory management: the growable segment. reserve() takes address space
// with cuMemAddressReserve; map() backs it granule by granule, each granule its own cuMemCreate allocation,
// mapped with cuMemMap and made readable and writable with cuMemSetAccess; unmap() gives granules back with
// cuMemUnmap + cuMemRelease. One allocation per granule because cuMemUnmap cannot unmap part of a mapping:
// the heap unmaps whatever granules it trims, in any grouping, and only per-granule mappings allow that.
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "backings/backing.hpp"
#include "backings/cuda_context.hpp"
#include "backings/cuda_device_copy.hpp"
#include "backings/cuda_leaf_locks.hpp"
#include "backings/cuda_stream_events.hpp"
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

  /// The last map() failure other than out of memory ("cuMemSetAccess of ... failed: ..."), or empty.
  std::string last_driver_error() const;

 private:
  /// The context is made before the base class, which needs the granularity the driver reports in it.
  CudaVmmBacking(const cuda_driver::Api& api, std::unique_ptr<CudaPrimaryContext> context,
                 const cuda_driver::MemAllocationProp& prop);

  /// cuMemAddressReserve aligned to the granularity; 0 when the driver refuses.
  std::uintptr_t do_reserve(std::uint64_t bytes) override;
  /// cuMemAddressFree (nothing inside is mapped: the contract, and cuMemAddressFree's own rule).
  void do_unreserve(std::uintptr_t base, std::uint64_t bytes) noexcept override;
  /// All or nothing: false when a granule cannot be mapped, after unmapping and releasing the granules this
  /// call had mapped. Out of memory (cuMemCreate) is the expected cause; any other driver failure is rolled
  /// back the same way and also returns false (the heap handles a refused map, and Allocator::try_allocate
  /// is noexcept, so nothing may be thrown), but is kept in last_driver_error() and said once on stderr, so
  /// that the out-of-memory report that follows is not the only trace of it.
  bool do_map(std::uintptr_t addr, std::uint64_t bytes) override;
  /// Waits for the device's streams (cuCtxSynchronize: a kernel queued before a block was freed may still
  /// use it), then unmaps and releases each granule.
  void do_unmap(std::uintptr_t addr, std::uint64_t bytes) noexcept override;
  /// cuMemGetInfo: the whole device, other processes' use included.
  BackingMemory do_memory() const override;
  bool do_touchable() const noexcept override { return false; }  // device memory: the host cannot dereference it
  /// The device's events (nullptr when the driver lacks them): blocks freed on a stream wait for their own
  /// events instead of the whole device.
  StreamEvents* do_stream_events() noexcept override { return leaves_.events.get(); }
  std::string do_describe() const override;
  /// Through the driver (cuMemcpyDtoH/HtoD); nullptr when it lacks the copy calls.
  DeviceCopy* do_device_copy() noexcept override { return copy_.get(); }
  /// fork(): the error's lock (last_driver_error() takes it without the backing's lock), then the events'.
  void do_lock_own_for_fork() noexcept override { leaves_.lock_for_fork(); }
  void do_unlock_own_after_fork() noexcept override { leaves_.unlock_after_fork(); }

  /// cuMemCreate + cuMemMap + cuMemSetAccess of the granule at `addr`, undoing its own steps on failure.
  /// Returns the failed call's result (kSuccess when mapped) and names the call in `failed_call`.
  cuda_driver::Result map_granule(std::uintptr_t addr, const char*& failed_call);
  /// cuMemUnmap + cuMemRelease of a granule map_granule mapped; aborts if the driver refuses.
  void unmap_granule(std::uintptr_t addr) noexcept;

  const cuda_driver::Api& api_;
  const std::unique_ptr<CudaPrimaryContext> context_;
  CudaLeafLocks leaves_;  // after context_, which its events use; the error is read outside the backing's lock
  const std::unique_ptr<CudaDeviceCopy> copy_;       // after context_, which it uses
  const cuda_driver::MemAllocationProp prop_;  // pinned memory on this device, no export handle
  // Invariant: a granule's address is a key exactly when the ledger records it mapped, i.e. its cuMemCreate
  // allocation is mapped there and accessible. The value is that allocation, to release at unmap. Guarded by the
  // backing's lock (used in hooks and the destructor only).
  std::unordered_map<std::uintptr_t, cuda_driver::MemHandle> handles_;
};

}  // namespace plimsoll::backings
