#pragma once
// The CUDA driver API entry points plimsoll needs, found with dlopen at run time. Declared here rather than
// taken from cuda.h so that the library builds, links and runs on machines without CUDA. Every type and
// constant below copies the driver's ABI from cuda.h (CUDA 13.0 headers; the structs are the header's _v1
// typedefs, the ABI versions the driver keeps); the static_asserts in cuda_driver.cpp pin the layouts.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

// The driver's opaque handle types, by cuda.h's own struct tags at global scope (as cuda.h declares them), so that a
// function type spelled with them is the driver's: UBSan's -fsanitize=function checks that a call through a
// pointer has the callee's type, and the fake libcuda.so.1 (tests/fake_libcuda) defines its entry points with
// these. Never defined here; cuda.h, included beside this, declares the same tags.
struct CUctx_st;
struct CUstream_st;
struct CUevent_st;
struct CUmemPoolHandle_st;

namespace plimsoll::cuda_driver {

// Types as the driver ABI defines them: CUresult and CUdevice_attribute are C enums (int-sized),
// CUdevice is an int, CUcontext/CUstream/CUevent opaque pointers, CUuuid 16 bytes, CUdeviceptr (the _v2
// one every 64-bit build uses) and CUmemGenericAllocationHandle unsigned long long.
using Result = int;
using Device = int;
using Context = CUctx_st*;             // CUcontext
using Stream = CUstream_st*;           // CUstream
using Event = CUevent_st*;             // CUevent
using MemPool = CUmemPoolHandle_st*;   // CUmemoryPool
using DevicePtr = unsigned long long;
using MemHandle = unsigned long long;
struct Uuid {
  unsigned char bytes[16];
};

constexpr Result kSuccess = 0;                // CUDA_SUCCESS
constexpr Result kErrorInvalidValue = 1;      // CUDA_ERROR_INVALID_VALUE
constexpr Result kErrorOutOfMemory = 2;       // CUDA_ERROR_OUT_OF_MEMORY
constexpr Result kErrorNoDevice = 100;        // CUDA_ERROR_NO_DEVICE
constexpr Result kErrorNotReady = 600;        // CUDA_ERROR_NOT_READY (cuEventQuery: work still pending)
constexpr Result kErrorNotSupported = 801;    // CUDA_ERROR_NOT_SUPPORTED
constexpr int kAttributeComputeCapabilityMajor = 75;
constexpr int kAttributeComputeCapabilityMinor = 76;
// CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: 1 when cuMemAddressReserve/cuMemCreate/cuMemMap work.
constexpr int kAttributeVirtualMemoryManagementSupported = 102;

// ---- The virtual memory management ABI (cuda.h, "Virtual Memory Management") ----

constexpr int kMemAllocationTypePinned = 0x1;        // CU_MEM_ALLOCATION_TYPE_PINNED
constexpr int kMemHandleTypeNone = 0x0;              // CU_MEM_HANDLE_TYPE_NONE: no export to other processes
constexpr int kMemLocationTypeDevice = 0x1;          // CU_MEM_LOCATION_TYPE_DEVICE: id is a device ordinal
constexpr int kMemAccessProtReadWrite = 0x3;         // CU_MEM_ACCESS_FLAGS_PROT_READWRITE
constexpr int kMemAllocGranularityMinimum = 0x0;     // CU_MEM_ALLOC_GRANULARITY_MINIMUM
constexpr int kMemAllocGranularityRecommended = 0x1; // CU_MEM_ALLOC_GRANULARITY_RECOMMENDED
constexpr unsigned int kMemHostAllocPortable = 0x1;  // CU_MEMHOSTALLOC_PORTABLE: pinned for every context
constexpr unsigned int kMemHostRegisterPortable = 0x1;  // CU_MEMHOSTREGISTER_PORTABLE: pinned for every context
constexpr unsigned int kEventDisableTiming = 0x2;    // CU_EVENT_DISABLE_TIMING: the cheap kind, for ordering only

/// CUmemLocation_v1: { CUmemLocationType type; int id; }.
struct MemLocation {
  int type = 0;
  int id = 0;
};

/// CUmemAllocationProp_v1: type, requestedHandleTypes, location, win32HandleMetaData, then allocFlags
/// { unsigned char compressionType; unsigned char gpuDirectRDMACapable; unsigned short usage;
///   unsigned char reserved[4]; }. Every field plimsoll does not set must be zero, as cuda.h requires.
struct MemAllocationProp {
  int type = 0;
  int requested_handle_types = 0;
  MemLocation location;
  void* win32_handle_meta_data = nullptr;
  unsigned char compression_type = 0;
  unsigned char gpu_direct_rdma_capable = 0;
  unsigned short usage = 0;
  unsigned char reserved[4] = {0, 0, 0, 0};
};

/// CUmemAccessDesc_v1: { CUmemLocation location; CUmemAccess_flags flags; }.
struct MemAccessDesc {
  MemLocation location;
  int flags = 0;
};

/// Pinned device memory on `device`, not exportable: what cuMemCreate and cuMemGetAllocationGranularity take.
MemAllocationProp device_allocation_prop(Device device);

/// Function pointers into libcuda.so.1. The members up to get_error_name are set whenever load() succeeds
/// (the GPU scan needs them); the rest may be null on a driver too old to have them, so their users probe
/// (has_vmm(), has_plain_memory(), has_events()).
struct Api {
  Result (*init)(unsigned int flags) = nullptr;
  Result (*device_get_count)(int* count) = nullptr;
  Result (*device_get)(Device* device, int ordinal) = nullptr;
  Result (*device_get_name)(char* name, int length, Device device) = nullptr;
  Result (*device_total_mem)(std::size_t* bytes, Device device) = nullptr;
  Result (*device_get_uuid)(Uuid* uuid, Device device) = nullptr;
  Result (*device_get_pci_bus_id)(char* bus_id, int length, Device device) = nullptr;
  Result (*device_get_attribute)(int* value, int attribute, Device device) = nullptr;
  Result (*primary_ctx_retain)(Context* context, Device device) = nullptr;
  Result (*primary_ctx_release)(Device device) = nullptr;
  Result (*ctx_push_current)(Context context) = nullptr;
  Result (*ctx_pop_current)(Context* context) = nullptr;
  Result (*mem_get_info)(std::size_t* free_bytes, std::size_t* total_bytes) = nullptr;
  Result (*get_error_name)(Result error, const char** name) = nullptr;  // optional: may stay null

  // Plain memory (the fallback backing) and pinned host memory; in every driver since CUDA 3.2.
  Result (*mem_alloc)(DevicePtr* pointer, std::size_t bytes) = nullptr;  // cuMemAlloc_v2
  Result (*mem_free)(DevicePtr pointer) = nullptr;                      // cuMemFree_v2
  Result (*mem_host_alloc)(void** pointer, std::size_t bytes, unsigned int flags) = nullptr;
  Result (*mem_free_host)(void* pointer) = nullptr;
  // Pinned host memory (the cpu-pinned device): page-locks mapped host granules so copies to the GPU are DMA.
  Result (*mem_host_register)(void* pointer, std::size_t bytes, unsigned int flags) = nullptr;  // cuMemHostRegister_v2
  Result (*mem_host_unregister)(void* pointer) = nullptr;
  Result (*ctx_synchronize)() = nullptr;  // waits for every stream of the current context
  // Copies between device and host memory (pausing a device with its contents kept).
  Result (*memcpy_dtoh)(void* host, DevicePtr device, std::size_t bytes) = nullptr;        // cuMemcpyDtoH_v2
  Result (*memcpy_htod)(DevicePtr device, const void* host, std::size_t bytes) = nullptr;  // cuMemcpyHtoD_v2

  // Virtual memory management (CUDA 10.2+; drivers before that lack the symbols).
  Result (*mem_address_reserve)(DevicePtr* pointer, std::size_t bytes, std::size_t alignment, DevicePtr hint,
                                unsigned long long flags) = nullptr;
  Result (*mem_address_free)(DevicePtr pointer, std::size_t bytes) = nullptr;
  Result (*mem_create)(MemHandle* handle, std::size_t bytes, const MemAllocationProp* prop,
                       unsigned long long flags) = nullptr;
  Result (*mem_release)(MemHandle handle) = nullptr;
  Result (*mem_map)(DevicePtr pointer, std::size_t bytes, std::size_t offset, MemHandle handle,
                    unsigned long long flags) = nullptr;
  Result (*mem_unmap)(DevicePtr pointer, std::size_t bytes) = nullptr;
  Result (*mem_set_access)(DevicePtr pointer, std::size_t bytes, const MemAccessDesc* descriptors,
                           std::size_t count) = nullptr;
  Result (*mem_get_allocation_granularity)(std::size_t* granularity, const MemAllocationProp* prop,
                                           int option) = nullptr;

  // Events, for stream-ordered reuse (not used by the backings yet; see docs/cuda.md).
  Result (*event_create)(Event* event, unsigned int flags) = nullptr;
  Result (*event_record)(Event event, Stream stream) = nullptr;
  Result (*event_query)(Event event) = nullptr;  // kSuccess when done, kErrorNotReady while pending
  Result (*event_destroy)(Event event) = nullptr;  // cuEventDestroy_v2
  Result (*stream_wait_event)(Stream stream, Event event, unsigned int flags) = nullptr;

  /// "CUDA_ERROR_NO_DEVICE (100)", or "CUresult 100" when the driver cannot name it.
  std::string error_name(Result error) const;

  bool has_vmm() const noexcept;
  bool has_plain_memory() const noexcept;
  bool has_events() const noexcept;
  bool has_host_register() const noexcept;
  bool has_copies() const noexcept;
};

/// Loads the driver. On failure returns nothing and sets `why` to a sentence for GpuScan::unavailable_reason.
std::optional<Api> load(std::string& why);

/// Why `device` cannot use the virtual memory backing (entry points missing, or
/// CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED is 0), or empty when it can.
std::string vmm_unsupported_reason(const Api& api, Device device);

}  // namespace plimsoll::cuda_driver
