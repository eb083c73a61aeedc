#include "backings/cuda_stream_events.hpp"

#include <cstdio>

#include <fmt/format.h>

namespace plimsoll::backings {

namespace cu = cuda_driver;

CudaStreamEvents::CudaStreamEvents(const cu::Api& api, const CudaPrimaryContext& context)
    : api_(api), context_(context) {}

void CudaStreamEvents::fail(const char* call, cu::Result result) noexcept {
  try {
    error_.keep(fmt::format("CUDA device {}: {} failed: {}", context_.device(), call, api_.error_name(result)));
  } catch (...) {  // no host memory for the message: the fallback that follows still runs
  }
}

bool CudaStreamEvents::push(const char* operation) noexcept {
  const cu::Result result = api_.ctx_push_current(context_.handle());
  if (result != cu::kSuccess) fail(operation, result);
  return result == cu::kSuccess;
}

void CudaStreamEvents::pop() noexcept {
  cu::Context popped = nullptr;
  api_.ctx_pop_current(&popped);
}

EventHandle CudaStreamEvents::create_event() noexcept {
  if (!push("cuCtxPushCurrent (to create an event)")) return nullptr;
  cu::Event event = nullptr;
  const cu::Result result = api_.event_create(&event, cu::kEventDisableTiming);
  pop();
  if (result != cu::kSuccess) {
    fail("cuEventCreate", result);
    return nullptr;
  }
  return event;
}

void CudaStreamEvents::destroy_event(EventHandle event) noexcept {
  if (event == nullptr || !push("cuCtxPushCurrent (to destroy an event)")) return;
  api_.event_destroy(static_cast<cu::Event>(event));
  pop();
}

bool CudaStreamEvents::record(EventHandle event, StreamHandle stream) noexcept {
  if (!push("cuCtxPushCurrent (to record an event)")) return false;
  const cu::Result result = api_.event_record(static_cast<cu::Event>(event), static_cast<cu::Stream>(stream));
  pop();
  if (result != cu::kSuccess) fail("cuEventRecord", result);
  return result == cu::kSuccess;
}

EventState CudaStreamEvents::query(EventHandle event) noexcept {
  if (!push("cuCtxPushCurrent (to query an event)")) return EventState::failed;
  const cu::Result result = api_.event_query(static_cast<cu::Event>(event));
  pop();
  if (result == cu::kSuccess) return EventState::complete;
  if (result == cu::kErrorNotReady) return EventState::pending;
  fail("cuEventQuery", result);
  return EventState::failed;
}

void CudaStreamEvents::synchronize_device() noexcept {
  if (!push("cuCtxPushCurrent (to synchronize)")) return;
  const cu::Result result = api_.ctx_synchronize();
  pop();
  if (result != cu::kSuccess) fail("cuCtxSynchronize", result);
}

std::string CudaStreamEvents::last_error() const {
  return error_.last();
}

}  // namespace plimsoll::backings
