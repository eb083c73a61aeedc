#include "devices/cuda_driver.hpp"

#include <dlfcn.h>

#include <bit>

#include <fmt/format.h>

namespace plimsoll::cuda_driver {
namespace {

template <typename Function>
bool bind(void* library, const char* symbol, Function& slot) {
  void* address = dlsym(library, symbol);
  if (address == nullptr) return false;
  slot = std::bit_cast<Function>(address);  // POSIX guarantees data and function pointers convert
  return true;
}

}  // namespace

std::string Api::error_name(Result error) const {
  const char* name = nullptr;
  if (get_error_name != nullptr && get_error_name(error, &name) == kSuccess && name != nullptr) {
    return fmt::format("{} ({})", name, error);
  }
  return fmt::format("CUresult {}", error);
}

std::optional<Api> load(std::string& why) {
  // Never dlclose'd: the driver keeps threads and at-exit hooks that must not outlive its code, and a second
  // dlopen of a loaded library only bumps a reference count, so each scan reloading it costs nothing.
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* error = dlerror();
    why = fmt::format("no CUDA driver (libcuda.so.1 not found: {}); GPUs are not available",
                      error != nullptr ? error : "unknown dlopen error");
    return std::nullopt;
  }

  Api api;
  const char* missing = nullptr;
  auto require = [&](const char* symbol, auto& slot) {
    if (missing == nullptr && !bind(library, symbol, slot)) missing = symbol;
  };
  require("cuInit", api.init);
  require("cuDeviceGetCount", api.device_get_count);
  require("cuDeviceGet", api.device_get);
  require("cuDeviceGetName", api.device_get_name);
  require("cuDeviceTotalMem_v2", api.device_total_mem);
  // The _v2 UUID call (CUDA 11.4+) returns MIG instance UUIDs too; older drivers only have the first.
  if (!bind(library, "cuDeviceGetUuid_v2", api.device_get_uuid)) require("cuDeviceGetUuid", api.device_get_uuid);
  require("cuDeviceGetPCIBusId", api.device_get_pci_bus_id);
  require("cuDeviceGetAttribute", api.device_get_attribute);
  require("cuDevicePrimaryCtxRetain", api.primary_ctx_retain);
  require("cuDevicePrimaryCtxRelease_v2", api.primary_ctx_release);
  require("cuCtxPushCurrent_v2", api.ctx_push_current);
  require("cuCtxPopCurrent_v2", api.ctx_pop_current);
  require("cuMemGetInfo_v2", api.mem_get_info);
  bind(library, "cuGetErrorName", api.get_error_name);
  if (missing != nullptr) {
    why = fmt::format("the CUDA driver is too old (libcuda.so.1 has no {}); update the NVIDIA driver to use GPUs",
                      missing);
    return std::nullopt;
  }
  return api;
}

}  // namespace plimsoll::cuda_driver
