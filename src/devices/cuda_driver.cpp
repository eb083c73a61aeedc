#include "devices/cuda_driver.hpp"

#include <dlfcn.h>

#include <bit>
#include <cstddef>

#include <fmt/format.h>

namespace plimsoll::cuda_driver {

// The layouts cuda.h gives these structs on every 64-bit platform CUDA supports. A mismatch would hand the
// driver garbage flags, so the build stops instead.
static_assert(sizeof(MemLocation) == 8);
static_assert(sizeof(MemAccessDesc) == 12 && offsetof(MemAccessDesc, flags) == 8);
static_assert(sizeof(MemAllocationProp) == 32);
static_assert(offsetof(MemAllocationProp, location) == 8);
static_assert(offsetof(MemAllocationProp, win32_handle_meta_data) == 16);
static_assert(offsetof(MemAllocationProp, compression_type) == 24);
static_assert(offsetof(MemAllocationProp, usage) == 26);
static_assert(offsetof(MemAllocationProp, reserved) == 28);
static_assert(sizeof(DevicePtr) == 8 && sizeof(MemHandle) == 8);

namespace {

template <typename Function>
bool bind(void* library, const char* symbol, Function& slot) {
  void* address = dlsym(library, symbol);
  if (address == nullptr) return false;
  slot = std::bit_cast<Function>(address);  // POSIX guarantees data and function pointers convert
  return true;
}

}  // namespace

MemAllocationProp device_allocation_prop(Device device) {
  MemAllocationProp prop;
  prop.type = kMemAllocationTypePinned;
  prop.requested_handle_types = kMemHandleTypeNone;
  prop.location = MemLocation{.type = kMemLocationTypeDevice, .id = device};
  return prop;
}

std::string Api::error_name(Result error) const {
  const char* name = nullptr;
  if (get_error_name != nullptr && get_error_name(error, &name) == kSuccess && name != nullptr) {
    return fmt::format("{} ({})", name, error);
  }
  return fmt::format("CUresult {}", error);
}

bool Api::has_vmm() const noexcept {
  return mem_address_reserve != nullptr && mem_address_free != nullptr && mem_create != nullptr &&
         mem_release != nullptr && mem_map != nullptr && mem_unmap != nullptr && mem_set_access != nullptr &&
         mem_get_allocation_granularity != nullptr && ctx_synchronize != nullptr;
}

bool Api::has_plain_memory() const noexcept {
  return mem_alloc != nullptr && mem_free != nullptr && ctx_synchronize != nullptr;
}

bool Api::has_events() const noexcept {
  return event_create != nullptr && event_record != nullptr && event_query != nullptr && event_destroy != nullptr &&
         stream_wait_event != nullptr;
}

bool Api::has_host_register() const noexcept {
  return mem_host_register != nullptr && mem_host_unregister != nullptr && ctx_synchronize != nullptr;
}

bool Api::has_copies() const noexcept {
  return memcpy_dtoh != nullptr && memcpy_htod != nullptr && ctx_synchronize != nullptr;
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

  // Symbols are looked up by their versioned names (cuMemAlloc_v2, not cuMemAlloc): libcuda exports every
  // ABI version of a call under its own name and never changes one, so the name pins the signature declared
  // above, which is what cuGetProcAddress(name, version) or the runtime's cudaGetDriverEntryPointByVersion
  // would return. The plain names of cuEventRecord and cuStreamWaitEvent are the legacy-default-stream
  // variants (not _ptsz), which is right for explicit streams.
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

  // Optional: a driver without them can still list GPUs; the backings probe with has_vmm() and friends.
  bind(library, "cuMemAlloc_v2", api.mem_alloc);
  bind(library, "cuMemFree_v2", api.mem_free);
  bind(library, "cuMemHostAlloc", api.mem_host_alloc);
  bind(library, "cuMemFreeHost", api.mem_free_host);
  bind(library, "cuMemHostRegister_v2", api.mem_host_register);
  bind(library, "cuMemHostUnregister", api.mem_host_unregister);
  bind(library, "cuCtxSynchronize", api.ctx_synchronize);
  bind(library, "cuMemcpyDtoH_v2", api.memcpy_dtoh);
  bind(library, "cuMemcpyHtoD_v2", api.memcpy_htod);
  bind(library, "cuMemAddressReserve", api.mem_address_reserve);
  bind(library, "cuMemAddressFree", api.mem_address_free);
  bind(library, "cuMemCreate", api.mem_create);
  bind(library, "cuMemRelease", api.mem_release);
  bind(library, "cuMemMap", api.mem_map);
  bind(library, "cuMemUnmap", api.mem_unmap);
  bind(library, "cuMemSetAccess", api.mem_set_access);
  bind(library, "cuMemGetAllocationGranularity", api.mem_get_allocation_granularity);
  bind(library, "cuEventCreate", api.event_create);
  bind(library, "cuEventRecord", api.event_record);
  bind(library, "cuEventQuery", api.event_query);
  bind(library, "cuEventDestroy_v2", api.event_destroy);
  bind(library, "cuStreamWaitEvent", api.stream_wait_event);
  return api;
}

std::string vmm_unsupported_reason(const Api& api, Device device) {
  if (!api.has_vmm())
    return "the CUDA driver has no virtual memory management (cuMemCreate, cuMemMap: CUDA 10.2 or later)";
  int supported = 0;
  if (const Result result =
          api.device_get_attribute(&supported, kAttributeVirtualMemoryManagementSupported, device);
      result != kSuccess)
    return fmt::format("the CUDA driver cannot say whether the GPU supports virtual memory management "
                       "(cuDeviceGetAttribute: {})", api.error_name(result));
  if (supported == 0)
    return "the GPU does not support virtual memory management "
           "(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED is 0)";
  return {};
}

}  // namespace plimsoll::cuda_driver
