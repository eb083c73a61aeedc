#include "backings/cuda_device_copy.hpp"

#include <new>

#include <fmt/format.h>

namespace plimsoll::backings {
namespace {

// Where each staging buffer came from, stored in front of it, so free_host needs no table.
struct alignas(64) StagingHeader {
  bool pinned = false;
};

}  // namespace

void* CudaDeviceCopy::allocate_host(std::uint64_t bytes) noexcept {
  const std::uint64_t total = bytes + sizeof(StagingHeader);
  void* memory = nullptr;
  bool pinned = false;
  if (api_.mem_host_alloc != nullptr && api_.mem_free_host != nullptr) {
    const CudaPrimaryContext::Scope scope(context_, "allocate pinned host memory", std::nothrow);
    pinned = api_.mem_host_alloc(&memory, total, cuda_driver::kMemHostAllocPortable) == cuda_driver::kSuccess &&
             memory != nullptr;
  }
  // Pinned memory is a limited resource of its own: ordinary memory copies more slowly, but copies.
  if (!pinned) memory = ::operator new(total, std::nothrow);
  if (memory == nullptr) return nullptr;
  auto* header = new (memory) StagingHeader{.pinned = pinned};
  return header + 1;
}

void CudaDeviceCopy::free_host(void* host, std::uint64_t) noexcept {
  if (host == nullptr) return;
  auto* header = static_cast<StagingHeader*>(host) - 1;
  if (header->pinned) {
    const CudaPrimaryContext::Scope scope(context_, "free pinned host memory", std::nothrow);
    api_.mem_free_host(header);
  } else {
    ::operator delete(header);
  }
}

std::string CudaDeviceCopy::to_host(void* host, std::uintptr_t device, std::uint64_t bytes) {
  const CudaPrimaryContext::Scope scope(context_, "copy memory to the host");
  if (const cuda_driver::Result result = api_.ctx_synchronize(); result != cuda_driver::kSuccess)
    return fmt::format("cuCtxSynchronize failed: {}", api_.error_name(result));
  if (const cuda_driver::Result result = api_.memcpy_dtoh(host, device, bytes); result != cuda_driver::kSuccess)
    return fmt::format("cuMemcpyDtoH of {} bytes at {:#x} failed: {}", bytes, device, api_.error_name(result));
  return {};
}

std::string CudaDeviceCopy::to_device(std::uintptr_t device, const void* host, std::uint64_t bytes) {
  const CudaPrimaryContext::Scope scope(context_, "copy memory back to the device");
  if (const cuda_driver::Result result = api_.memcpy_htod(device, host, bytes); result != cuda_driver::kSuccess)
    return fmt::format("cuMemcpyHtoD of {} bytes at {:#x} failed: {}", bytes, device, api_.error_name(result));
  return {};
}

}  // namespace plimsoll::backings
