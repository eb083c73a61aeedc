#include "backings/pinned_host_backing.hpp"

#include <cstdio>

#include <fmt/format.h>

#include "plimsoll/error.hpp"
#include "plimsoll/size.hpp"

namespace plimsoll::backings {

namespace cu = cuda_driver;

namespace {
const cu::Api& checked_api(const cu::Api& api) {
  if (!api.has_host_register())
    throw DeviceUnavailable("cpu-pinned is not available: the CUDA driver lacks cuMemHostRegister/"
                            "cuMemHostUnregister; update the NVIDIA driver, or use cpu");
  return api;
}
}  // namespace

PinnedHostBacking::PinnedHostBacking(const cu::Api& api, cu::Device device, std::uint64_t capacity_bytes,
                                     std::uint64_t granularity)
    : OwningBackingAdaptor("pinned host", std::make_unique<HostBacking>(granularity, capacity_bytes)),
      api_(checked_api(api)),
      context_(api_, device),
      leaves_(api_.has_events() ? std::make_unique<CudaStreamEvents>(api_, context_) : nullptr, "cpu-pinned: ",
              "reported as out of memory") {}

bool PinnedHostBacking::do_map(std::uintptr_t addr, std::uint64_t bytes) {
  if (!upstream().map(addr, bytes)) return false;
  const std::uint64_t granule = granularity();
  const CudaPrimaryContext::Scope scope(context_, "pin host memory", std::nothrow);
  for (std::uint64_t offset = 0; offset < bytes; offset += granule) {
    // One registration per granule: cuMemHostUnregister takes a registration whole, and the heap unmaps granules
    // in any grouping (as for the VMM backing's one allocation per granule).
    const cu::Result result =
        api_.mem_host_register(reinterpret_cast<void*>(addr + offset), granule, cu::kMemHostRegisterPortable);
    if (result == cu::kSuccess) continue;
    for (std::uint64_t done = 0; done < offset; done += granule)
      api_.mem_host_unregister(reinterpret_cast<void*>(addr + done));
    upstream().unmap(addr, bytes);
    leaves_.error.keep(fmt::format("cuMemHostRegister of a {} granule at {:#x} failed: {}", format_size(granule),
                                   addr + offset, api_.error_name(result)));
    return false;
  }
  return true;
}

void PinnedHostBacking::do_unmap(std::uintptr_t addr, std::uint64_t bytes) noexcept {
  {
    const CudaPrimaryContext::Scope scope(context_, "unpin host memory", std::nothrow);
    if (leaves_.events == nullptr || leaves_.events->take_unordered_frees()) api_.ctx_synchronize();
    const std::uint64_t granule = granularity();
    for (std::uint64_t offset = 0; offset < bytes; offset += granule) {
      if (const cu::Result result = api_.mem_host_unregister(reinterpret_cast<void*>(addr + offset));
          result != cu::kSuccess)
        abort_on_driver_failure(fmt::format("cuMemHostUnregister of {:#x} failed: {}", addr + offset,
                                            api_.error_name(result)));
    }
  }
  upstream().unmap(addr, bytes);
}

std::string PinnedHostBacking::do_describe() const {
  return fmt::format("pinned host memory (cuMemHostRegister, granularity {})", format_size(granularity()));
}

std::string PinnedHostBacking::last_driver_error() const { return leaves_.error.last(); }

}  // namespace plimsoll::backings
