#include "real_driver.hpp"

#include <dlfcn.h>

#include <cstring>

namespace plimsoll::cuda_intercept {

namespace {

using Dlsym = void* (*)(void*, const char*);

PLIMSOLL_UNINSTRUMENTED Dlsym find_real_dlsym() {
  // dlvsym is not interposed. glibc 2.34 moved dlsym into libc under a new version; older ones have only 2.2.5.
  // No library code on the way (an initializer_list's begin() would be instrumented: see PLIMSOLL_UNINSTRUMENTED).
  void* found = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
  if (found == nullptr) found = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
  if (found == nullptr) found = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.17");
  return reinterpret_cast<Dlsym>(found);
}

void* cuda_library() {
  static void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  return library;
}

template <typename Function>
void bind(const char* symbol, Function& slot) {
  void* library = cuda_library();
  slot = library != nullptr ? reinterpret_cast<Function>(real_dlsym(library, symbol)) : nullptr;
}

RealDriver load() {
  RealDriver d;
  bind("cuMemAlloc_v2", d.mem_alloc);
  bind("cuMemFree_v2", d.mem_free);
  bind("cuMemAllocPitch_v2", d.mem_alloc_pitch);
  bind("cuMemAllocManaged", d.mem_alloc_managed);
  bind("cuMemCreate", d.mem_create);
  bind("cuMemRelease", d.mem_release);
  bind("cuMemAllocAsync", d.mem_alloc_async);
  bind("cuMemAllocAsync_ptsz", d.mem_alloc_async_ptsz);
  bind("cuMemFreeAsync", d.mem_free_async);
  bind("cuMemFreeAsync_ptsz", d.mem_free_async_ptsz);
  bind("cuMemAllocFromPoolAsync", d.mem_alloc_from_pool_async);
  bind("cuMemAllocFromPoolAsync_ptsz", d.mem_alloc_from_pool_async_ptsz);
  bind("cuMemGetInfo_v2", d.mem_get_info);
  bind("cuDeviceTotalMem_v2", d.device_total_mem);
  bind("cuDeviceGetUuid", d.device_get_uuid);
  bind("cuCtxGetDevice", d.ctx_get_device);
  bind("cuCtxCreate_v2", d.ctx_create_v2);
  bind("cuCtxCreate_v3", d.ctx_create_v3);
  bind("cuCtxCreate_v4", d.ctx_create_v4);
  bind("cuDevicePrimaryCtxRetain", d.primary_ctx_retain);
  bind("cuCtxPushCurrent_v2", d.ctx_push_current);
  bind("cuCtxPopCurrent_v2", d.ctx_pop_current);
  bind("cuGetProcAddress", d.get_proc_address);
  bind("cuGetProcAddress_v2", d.get_proc_address_v2);
  return d;
}

// The real entry point of each wrapper, in kWrappers' order.
struct Substitutes {
  void* real[64] = {};
};

const Substitutes& substitutes() {
  static const Substitutes table = [] {
    Substitutes s;
    void* library = cuda_library();
    for (std::size_t i = 0; i < kWrapperCount && i < 64; ++i)
      s.real[i] = library != nullptr ? real_dlsym(library, kWrappers[i].name) : nullptr;
    return s;
  }();
  return table;
}

}  // namespace

PLIMSOLL_UNINSTRUMENTED void* real_dlsym(void* handle, const char* symbol) {
  static const Dlsym function = find_real_dlsym();
  return function != nullptr ? function(handle, symbol) : nullptr;
}

const RealDriver& real() {
  static const RealDriver driver = load();
  return driver;
}

void* substitute(void* function) {
  if (function == nullptr) return nullptr;
  const Substitutes& s = substitutes();
  for (std::size_t i = 0; i < kWrapperCount; ++i)
    if (s.real[i] == function) return kWrappers[i].ours;
  return function;
}

PLIMSOLL_UNINSTRUMENTED void* substitute_named(const char* symbol, void* function) {
  if (function == nullptr || symbol == nullptr || symbol[0] != 'c' || symbol[1] != 'u') return function;
  for (std::size_t i = 0; i < kWrapperCount; ++i)  // names first: only a driver name loads the table
    if (std::strcmp(kWrappers[i].name, symbol) == 0)
      return substitutes().real[i] == function ? kWrappers[i].ours : function;
  return function;
}

}  // namespace plimsoll::cuda_intercept
