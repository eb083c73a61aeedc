// A driver shim that is not plimsoll's (as HAMi-core or a profiler is): preloaded, it wraps cuMemAlloc_v2 and
// cuMemCreate by name and through dlsym, and passes every call straight to the driver behind it. A Runtime must
// not take it for plimsoll's interposer (tests/sharing_runtime_test.cpp): nothing here charges a ledger.
#include <dlfcn.h>

#include <cstddef>
#include <cstring>

namespace {

using Result = int;
using DevicePtr = unsigned long long;
using MemHandle = unsigned long long;
struct AllocationProp;  // CUmemAllocationProp, passed through untouched
using MemAlloc = Result (*)(DevicePtr*, std::size_t);
using MemCreate = Result (*)(MemHandle*, std::size_t, const AllocationProp*, unsigned long long);
using Dlsym = void* (*)(void*, const char*);

// A sanitizer's runtime looks its interceptors up with dlsym while it starts, before instrumented code can run: the
// dlsym path is left uninstrumented (a no-op in other builds).
#define UNINSTRUMENTED __attribute__((no_sanitize("address", "undefined")))

UNINSTRUMENTED Dlsym find_real_dlsym() {
  void* found = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
  if (found == nullptr) found = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
  if (found == nullptr) found = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.17");
  return reinterpret_cast<Dlsym>(found);
}

UNINSTRUMENTED Dlsym real_dlsym() {
  // Found once, under the guard of a function-local static: threads racing here wait for the one answer.
  static const Dlsym found = find_real_dlsym();
  return found;
}

void* driver_symbol(const char* name) {
  static void* const driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  return driver != nullptr && real_dlsym() != nullptr ? real_dlsym()(driver, name) : nullptr;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) Result cuMemAlloc_v2(DevicePtr* pointer, std::size_t bytes) {
  static const auto real = reinterpret_cast<MemAlloc>(driver_symbol("cuMemAlloc_v2"));
  return real != nullptr ? real(pointer, bytes) : 500;  // CUDA_ERROR_NOT_FOUND
}

extern "C" __attribute__((visibility("default"))) Result cuMemCreate(MemHandle* handle, std::size_t bytes,
                                                                     const AllocationProp* prop,
                                                                     unsigned long long flags) {
  static const auto real = reinterpret_cast<MemCreate>(driver_symbol("cuMemCreate"));
  return real != nullptr ? real(handle, bytes, prop, flags) : 500;
}

// A lookup on the driver's handle never sees a preload, so shims export dlsym too and hand back their wrappers.
extern "C" __attribute__((visibility("default"))) UNINSTRUMENTED void* dlsym(void* handle, const char* symbol) {
  if (handle != RTLD_NEXT) {
    if (std::strcmp(symbol, "cuMemAlloc_v2") == 0) return reinterpret_cast<void*>(&cuMemAlloc_v2);
    if (std::strcmp(symbol, "cuMemCreate") == 0) return reinterpret_cast<void*>(&cuMemCreate);
  }
  return real_dlsym() != nullptr ? real_dlsym()(handle, symbol) : nullptr;
}
