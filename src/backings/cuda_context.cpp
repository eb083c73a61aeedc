#include "backings/cuda_context.hpp"

#include <cstdio>
#include <cstdlib>
#include <new>

#include <fmt/format.h>

#include "plimsoll/error.hpp"

namespace plimsoll::backings {

namespace cu = cuda_driver;

void abort_on_driver_failure(const std::string& what) noexcept {
  std::fprintf(stderr, "plimsoll: the CUDA driver failed where plimsoll cannot recover: %s\n", what.c_str());
  std::abort();
}

CudaPrimaryContext::CudaPrimaryContext(const cu::Api& api, cu::Device device) : api_(api), device_(device) {
  if (const cu::Result result = api_.primary_ctx_retain(&context_, device_); result != cu::kSuccess)
    throw DeviceUnavailable(fmt::format("CUDA device {} cannot be used: the driver refused its primary context "
                                        "(cuDevicePrimaryCtxRetain: {})",
                                        device_, api_.error_name(result)));
}

CudaPrimaryContext::~CudaPrimaryContext() { api_.primary_ctx_release(device_); }

CudaPrimaryContext::Scope::Scope(const CudaPrimaryContext& context, std::string_view operation)
    : api_(context.api_) {
  if (const cu::Result result = api_.ctx_push_current(context.context_); result != cu::kSuccess)
    throw DeviceUnavailable(fmt::format("CUDA device {}: cannot {}: the driver refused to make its context current "
                                        "(cuCtxPushCurrent: {})",
                                        context.device_, operation, api_.error_name(result)));
}

CudaPrimaryContext::Scope::Scope(const CudaPrimaryContext& context, std::string_view operation,
                                 std::nothrow_t) noexcept
    : api_(context.api_) {
  if (const cu::Result result = api_.ctx_push_current(context.context_); result != cu::kSuccess)
    abort_on_driver_failure(fmt::format("CUDA device {}: cannot {}: cuCtxPushCurrent failed ({})", context.device_,
                                        operation, api_.error_name(result)));
}

CudaPrimaryContext::Scope::~Scope() {
  cu::Context popped = nullptr;
  api_.ctx_pop_current(&popped);  // restores the caller's context
}

BackingMemory CudaPrimaryContext::memory() const {
  const Scope scope(*this, "read its free memory");
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  if (const cuda_driver::Result result = api_.mem_get_info(&free_bytes, &total_bytes);
      result != cuda_driver::kSuccess) {
    throw Error(fmt::format("CUDA device {}: cuMemGetInfo failed ({})", device_, api_.error_name(result)));
  }
  return {.total_bytes = total_bytes, .free_bytes = free_bytes};
}

}  // namespace plimsoll::backings
