#include "backings/cuda_region_backing.hpp"

#include <limits>
#include <new>

#include <fmt/format.h>

#include "plimsoll/error.hpp"
#include "plimsoll/size.hpp"

namespace plimsoll::backings {
namespace {

namespace cu = cuda_driver;

const cu::Api& checked_api(const cu::Api& api, cu::Device device) {
  if (!api.has_plain_memory())
    throw DeviceUnavailable(
        fmt::format("CUDA device {} cannot be used: the driver has no cuMemAlloc_v2/cuCtxSynchronize", device));
  return api;
}

}  // namespace

CudaRegionBacking::CudaRegionBacking(const cu::Api& api, cu::Device device, std::uint64_t granularity)
    : Backing("CUDA region", granularity),
      api_(checked_api(api, device)),
      context_(api_, device),
      leaves_(api_.has_events() ? std::make_unique<CudaStreamEvents>(api_, context_) : nullptr, "",
              "reported as out of memory") {}

std::string CudaRegionBacking::last_driver_error() const { return leaves_.error.last(); }

bool CudaRegionBacking::allocate_or_note(cu::DevicePtr& raw, std::uint64_t bytes) {
  const cu::Result result = api_.mem_alloc(&raw, bytes);
  if (result == cu::kSuccess) return true;
  if (result != cu::kErrorOutOfMemory) {
    leaves_.error.keep(fmt::format("CUDA device {}: cuMemAlloc of {} failed: {}", context_.device(),
                                   format_size(bytes), api_.error_name(result)));
  }
  return false;
}

CudaRegionBacking::~CudaRegionBacking() {
  if (allocations_.empty()) return;
  const CudaPrimaryContext::Scope scope(context_, "free its memory", std::nothrow);
  api_.ctx_synchronize();
  for (const auto& [base, raw] : allocations_) api_.mem_free(raw);
}

std::uintptr_t CudaRegionBacking::do_reserve(std::uint64_t bytes) {
  const CudaPrimaryContext::Scope scope(context_, "allocate memory");
  const std::uint64_t granule = granularity();
  cu::DevicePtr raw = 0;
  if (!allocate_or_note(raw, bytes)) return 0;
  std::uintptr_t base = raw;
  // The driver aligns large allocations to 2 MiB in practice but promises only 256 bytes; the heap's granule
  // arithmetic needs the base aligned, so a misaligned allocation is redone with a granule of slack.
  if (!util::is_aligned(base, granule)) {
    api_.mem_free(raw);
    if (bytes > std::numeric_limits<std::uint64_t>::max() - granule) return 0;
    if (!allocate_or_note(raw, bytes + granule)) return 0;
    base = util::align_up(raw, granule);
  }
  allocations_.emplace(base, raw);
  return base;
}

void CudaRegionBacking::do_unreserve(std::uintptr_t base, std::uint64_t) noexcept {
  const auto found = allocations_.find(base);
  const CudaPrimaryContext::Scope scope(context_, "free memory", std::nothrow);
  // A kernel queued before the heap let go may still use the memory; cuMemFree does not promise to wait.
  api_.ctx_synchronize();
  if (const cu::Result result = api_.mem_free(found->second); result != cu::kSuccess)
    abort_on_driver_failure(fmt::format("cuMemFree of {:#x} failed: {}", found->second, api_.error_name(result)));
  allocations_.erase(found);
}

BackingMemory CudaRegionBacking::do_memory() const { return context_.memory(); }

std::string CudaRegionBacking::do_describe() const {
  return fmt::format("CUDA device {} plain memory (cuMemAlloc, no virtual memory management)", context_.device());
}

}  // namespace plimsoll::backings
