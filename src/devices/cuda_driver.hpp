#pragma once
// The few CUDA driver API entry points plimsoll needs, found with dlopen at run time. Declared here rather than
// taken from cuda.h so that the library builds, links and runs on machines without CUDA.
#include <cstddef>
#include <optional>
#include <string>

namespace plimsoll::cuda_driver {

// Types as the driver ABI defines them: CUresult and CUdevice_attribute are C enums (int-sized),
// CUdevice is an int, CUcontext an opaque pointer, CUuuid 16 bytes.
using Result = int;
using Device = int;
using Context = struct OpaqueContext*;
struct Uuid {
  unsigned char bytes[16];
};

constexpr Result kSuccess = 0;
constexpr Result kErrorNoDevice = 100;
constexpr int kAttributeComputeCapabilityMajor = 75;
constexpr int kAttributeComputeCapabilityMinor = 76;

/// Function pointers into libcuda.so.1. Every member is set when load() succeeds.
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

  /// "CUDA_ERROR_NO_DEVICE (100)", or "CUresult 100" when the driver cannot name it.
  std::string error_name(Result error) const;
};

/// Loads the driver. On failure returns nothing and sets `why` to a sentence for GpuScan::unavailable_reason.
std::optional<Api> load(std::string& why);

}  // namespace plimsoll::cuda_driver
