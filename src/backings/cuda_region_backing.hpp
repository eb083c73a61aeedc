#pragma once
// A GPU's memory as one plain cuMemAlloc per reservation: the fallback for devices or drivers without
// virtual memory management. reserve() allocates the whole range at once, so memory is taken up front and
// map()/unmap() only keep the books: the preallocate policy is the only one that fits (an on_demand heap
// reserves 4x its limit and would be refused). Nothing is given back before the heap goes.
#include <cstdint>
#include <memory>
#include <map>
#include <string>

#include "backings/backing.hpp"
#include "backings/cuda_context.hpp"
#include "backings/cuda_leaf_locks.hpp"
#include "backings/granules.hpp"
#include "devices/cuda_driver.hpp"

namespace plimsoll::backings {

class CudaRegionBacking final : public Backing {
 public:
  /// `api` must outlive this. `granularity` only sets the heap's bookkeeping unit (a power of two).
  /// Throws DeviceUnavailable when the driver lacks cuMemAlloc or refuses the context.
  CudaRegionBacking(const cuda_driver::Api& api, cuda_driver::Device device,
                    std::uint64_t granularity = kDefaultGranularity);
  /// Frees what the engine left reserved (a heap normally leaves nothing).
  ~CudaRegionBacking() override;

  /// The last driver failure other than out of memory (a refused reserve is reported as out of memory); "" if none.
  std::string last_driver_error() const;

 private:
  /// cuMemAlloc of the whole range, aligned to the granularity; 0 when the device cannot hold it or the driver
  /// refuses (that error kept in last_driver_error()).
  std::uintptr_t do_reserve(std::uint64_t bytes) override;
  /// cuMemFree after the device's streams finish.
  void do_unreserve(std::uintptr_t base, std::uint64_t bytes) noexcept override;
  /// Always true (the memory is already there): the books alone say which granules the heap uses.
  bool do_map(std::uintptr_t, std::uint64_t) override { return true; }
  /// Bookkeeping only: cudaMalloc'd memory cannot be given back in parts.
  void do_unmap(std::uintptr_t, std::uint64_t) noexcept override {}
  BackingMemory do_memory() const override;  // cuMemGetInfo
  bool do_touchable() const noexcept override { return false; }
  /// The device's events (nullptr when the driver lacks them): blocks freed on a stream wait for their own
  /// events instead of the whole device.
  StreamEvents* do_stream_events() noexcept override { return leaves_.events.get(); }
  /// fork(): the error's lock (last_driver_error() takes it without the backing's lock), then the events', in the
  /// order every CUDA backing takes them (CudaLeafLocks).
  void do_lock_own_for_fork() noexcept override { leaves_.lock_for_fork(); }
  void do_unlock_own_after_fork() noexcept override { leaves_.unlock_after_fork(); }
  std::string do_describe() const override;
  /// cuMemAlloc; false when refused, keeping any error but out of memory.
  bool allocate_or_note(cuda_driver::DevicePtr& raw, std::uint64_t bytes);

  const cuda_driver::Api& api_;
  const CudaPrimaryContext context_;
  CudaLeafLocks leaves_;  // after context_, which its events use; the error is read outside the backing's lock
  // Invariant: one entry per ledger reservation, keyed by its (aligned) base; the value is the pointer
  // cuMemAlloc returned, which cuMemFree needs (below the base when the allocation had to be padded). Guarded by
  // the backing's lock (used in hooks and the destructor only).
  std::map<std::uintptr_t, cuda_driver::DevicePtr> allocations_;
};

}  // namespace plimsoll::backings
