#include "devices/gpu_scan.hpp"

#include <array>
#include <string>

#include <fmt/format.h>

namespace plimsoll {
namespace {

namespace cu = cuda_driver;

/// A failed driver call, carried out of the per-device queries to become the scan's reason.
struct DriverFailure {
  std::string reason;
};

class Querier {
 public:
  explicit Querier(const cu::Api& api) : api_(api) {}

  void check(cu::Result result, std::string_view call, int ordinal) const {
    if (result == cu::kSuccess) return;
    throw DriverFailure{fmt::format("the CUDA driver failed to describe GPU {} ({}: {}); GPUs are not available",
                                    ordinal, call, api_.error_name(result))};
  }

  GpuInfo describe(int ordinal) const {
    GpuInfo info;
    info.ordinal = ordinal;
    cu::Device device = 0;
    check(api_.device_get(&device, ordinal), "cuDeviceGet", ordinal);

    std::array<char, 256> name{};
    check(api_.device_get_name(name.data(), static_cast<int>(name.size() - 1), device), "cuDeviceGetName", ordinal);
    info.name = name.data();

    std::size_t total = 0;
    check(api_.device_total_mem(&total, device), "cuDeviceTotalMem_v2", ordinal);
    info.total_bytes = total;

    cu::Uuid uuid{};
    check(api_.device_get_uuid(&uuid, device), "cuDeviceGetUuid", ordinal);
    info.uuid = format_uuid(uuid);

    std::array<char, 64> bus_id{};
    check(api_.device_get_pci_bus_id(bus_id.data(), static_cast<int>(bus_id.size() - 1), device),
          "cuDeviceGetPCIBusId", ordinal);
    info.pci_bus_id = bus_id.data();

    check(api_.device_get_attribute(&info.compute_major, cu::kAttributeComputeCapabilityMajor, device),
          "cuDeviceGetAttribute", ordinal);
    check(api_.device_get_attribute(&info.compute_minor, cu::kAttributeComputeCapabilityMinor, device),
          "cuDeviceGetAttribute", ordinal);

    info.free_bytes = free_bytes(device, ordinal);
    return info;
  }

 private:
  // Free memory is only known inside a context. The primary context is the one PyTorch and the runtime API
  // share, so retaining it reuses theirs when it exists instead of costing the GPU a second context.
  std::uint64_t free_bytes(cu::Device device, int ordinal) const {
    cu::Context context = nullptr;
    check(api_.primary_ctx_retain(&context, device), "cuDevicePrimaryCtxRetain", ordinal);
    cu::Result result = api_.ctx_push_current(context);
    std::size_t free = 0;
    std::size_t total = 0;
    std::string_view failed_call = "cuCtxPushCurrent_v2";
    if (result == cu::kSuccess) {
      result = api_.mem_get_info(&free, &total);
      failed_call = "cuMemGetInfo_v2";
      cu::Context popped = nullptr;
      api_.ctx_pop_current(&popped);  // restores the caller's current context whatever happened
    }
    api_.primary_ctx_release(device);
    check(result, failed_call, ordinal);
    return free;
  }

  static std::string format_uuid(const cu::Uuid& uuid) {
    std::string text = "GPU-";
    for (std::size_t i = 0; i < std::size(uuid.bytes); ++i) {
      if (i == 4 || i == 6 || i == 8 || i == 10) text += '-';
      text += fmt::format("{:02x}", uuid.bytes[i]);
    }
    return text;
  }

  const cu::Api& api_;
};

}  // namespace

GpuScan scan_gpus_with(const cu::Api& api) {
  GpuScan scan;
  const cu::Result init = api.init(0);
  if (init == cu::kErrorNoDevice) {
    scan.unavailable_reason = fmt::format(
        "the CUDA driver sees no GPU (cuInit: {}); check nvidia-smi, and CUDA_VISIBLE_DEVICES if it is set",
        api.error_name(init));
    return scan;
  }
  if (init != cu::kSuccess) {
    scan.unavailable_reason =
        fmt::format("the CUDA driver failed to start (cuInit: {}); GPUs are not available", api.error_name(init));
    return scan;
  }

  int count = 0;
  if (const cu::Result result = api.device_get_count(&count); result != cu::kSuccess) {
    scan.unavailable_reason = fmt::format("the CUDA driver cannot count GPUs (cuDeviceGetCount: {})",
                                          api.error_name(result));
    return scan;
  }
  if (count <= 0) {
    scan.unavailable_reason =
        "the CUDA driver reports 0 GPUs; check nvidia-smi, and CUDA_VISIBLE_DEVICES if it is set";
    return scan;
  }

  const Querier querier(api);
  try {
    for (int ordinal = 0; ordinal < count; ++ordinal) scan.gpus.push_back(querier.describe(ordinal));
  } catch (const DriverFailure& failure) {
    scan.gpus.clear();  // all or nothing: a partial list would pass for the whole machine
    scan.unavailable_reason = failure.reason;
  }
  return scan;
}

GpuScan scan_gpus() {
  std::string why;
  const std::optional<cu::Api> api = cu::load(why);
  if (!api) return GpuScan{.gpus = {}, .unavailable_reason = why};
  return scan_gpus_with(*api);
}

}  // namespace plimsoll
