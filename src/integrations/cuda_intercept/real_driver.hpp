#pragma once
// The real libcuda.so.1 behind the interposer: its entry points, found with the real dlsym (ours would hand back
// our own wrappers), and the map from each real entry point to the wrapper that replaces it, which the dlsym and
// cuGetProcAddress wrappers consult.
#include <cstddef>
#include <cstdint>

#include "devices/cuda_driver.hpp"

// A sanitizer's runtime (ASan, in the tests' sanitized builds) looks its interceptors up with dlsym while it
// starts, before instrumented code can run, and our dlsym answers it: the dlsym path is left uninstrumented. A no-op
// in other builds.
#define PLIMSOLL_UNINSTRUMENTED __attribute__((no_sanitize("address", "undefined")))

namespace plimsoll::cuda_intercept {

namespace cu = cuda_driver;
using Pool = cu::MemPool;

struct RealDriver {
  cu::Result (*mem_alloc)(cu::DevicePtr*, std::size_t) = nullptr;
  cu::Result (*mem_free)(cu::DevicePtr) = nullptr;
  cu::Result (*mem_alloc_pitch)(cu::DevicePtr*, std::size_t*, std::size_t, std::size_t, unsigned int) = nullptr;
  cu::Result (*mem_alloc_managed)(cu::DevicePtr*, std::size_t, unsigned int) = nullptr;
  cu::Result (*mem_create)(cu::MemHandle*, std::size_t, const cu::MemAllocationProp*, unsigned long long) = nullptr;
  cu::Result (*mem_release)(cu::MemHandle) = nullptr;
  cu::Result (*mem_alloc_async)(cu::DevicePtr*, std::size_t, cu::Stream) = nullptr;
  cu::Result (*mem_alloc_async_ptsz)(cu::DevicePtr*, std::size_t, cu::Stream) = nullptr;
  cu::Result (*mem_free_async)(cu::DevicePtr, cu::Stream) = nullptr;
  cu::Result (*mem_free_async_ptsz)(cu::DevicePtr, cu::Stream) = nullptr;
  cu::Result (*mem_alloc_from_pool_async)(cu::DevicePtr*, std::size_t, Pool, cu::Stream) = nullptr;
  cu::Result (*mem_alloc_from_pool_async_ptsz)(cu::DevicePtr*, std::size_t, Pool, cu::Stream) = nullptr;
  cu::Result (*mem_get_info)(std::size_t*, std::size_t*) = nullptr;
  cu::Result (*device_total_mem)(std::size_t*, cu::Device) = nullptr;
  cu::Result (*device_get_uuid)(cu::Uuid*, cu::Device) = nullptr;
  cu::Result (*ctx_get_device)(cu::Device*) = nullptr;
  cu::Result (*ctx_create_v2)(cu::Context*, unsigned int, cu::Device) = nullptr;
  cu::Result (*ctx_create_v3)(cu::Context*, void*, int, unsigned int, cu::Device) = nullptr;
  cu::Result (*ctx_create_v4)(cu::Context*, void*, unsigned int, cu::Device) = nullptr;
  cu::Result (*primary_ctx_retain)(cu::Context*, cu::Device) = nullptr;
  cu::Result (*ctx_push_current)(cu::Context) = nullptr;
  cu::Result (*ctx_pop_current)(cu::Context*) = nullptr;
  cu::Result (*get_proc_address)(const char*, void**, int, unsigned long long) = nullptr;
  cu::Result (*get_proc_address_v2)(const char*, void**, int, unsigned long long, int*) = nullptr;
};

/// The real driver, loaded on first use (every member null when libcuda.so.1 cannot be opened).
const RealDriver& real();

/// glibc's dlsym, not ours.
PLIMSOLL_UNINSTRUMENTED void* real_dlsym(void* handle, const char* symbol);

/// The wrapper that stands for `function` (a real driver entry point), or `function` itself when it is not one
/// the interposer replaces.
void* substitute(void* function);
/// Our wrapper named `symbol` when `function` is the real driver's entry point of that name; else `function`.
PLIMSOLL_UNINSTRUMENTED void* substitute_named(const char* symbol, void* function);

/// Our wrappers, by exported name: filled by intercept.cpp.
struct Wrapper {
  const char* name;
  void* ours;
};
extern const Wrapper kWrappers[];
extern const std::size_t kWrapperCount;

}  // namespace plimsoll::cuda_intercept
