#pragma once
// Copies between a GPU's mapped memory and the host through the driver (cuMemcpyDtoH / cuMemcpyHtoD), into pinned
// host memory (cuMemHostAlloc) when the driver has it, else ordinary host memory: what pausing a CUDA device with
// its contents kept uses.
#include "backings/cuda_context.hpp"
#include "backings/device_copy.hpp"
#include "devices/cuda_driver.hpp"

namespace plimsoll::backings {

class CudaDeviceCopy final : public DeviceCopy {
 public:
  /// `api` and `context` must outlive this; `api.has_copies()` must hold.
  CudaDeviceCopy(const cuda_driver::Api& api, const CudaPrimaryContext& context) : api_(api), context_(context) {}

  void* allocate_host(std::uint64_t bytes) noexcept override;
  void free_host(void* host, std::uint64_t bytes) noexcept override;
  /// Waits for the whole device first (cuCtxSynchronize): a kernel queued earlier may still write the memory.
  std::string to_host(void* host, std::uintptr_t device, std::uint64_t bytes) override;
  std::string to_device(std::uintptr_t device, const void* host, std::uint64_t bytes) override;

 private:
  const cuda_driver::Api& api_;
  const CudaPrimaryContext& context_;
};

}  // namespace plimsoll::backings
