#include "backings/cuda_vmm_backing.hpp"

#include <algorithm>
#include <cstdio>
#include <new>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "backings/granules.hpp"
#include "plimsoll/error.hpp"
#include "plimsoll/size.hpp"

namespace plimsoll::backings {
namespace {

namespace cu = cuda_driver;

const cu::Api& checked_api(const cu::Api& api, cu::Device device) {
  if (const std::string why = cu::vmm_unsupported_reason(api, device); !why.empty())
    throw DeviceUnavailable(fmt::format("CUDA device {} cannot grow its memory in place: {}", device, why));
  return api;
}

/// The recommended granularity (bigger granules map faster on some GPUs), never below the minimum the
/// driver requires of cuMemCreate sizes and cuMemMap addresses.
std::uint64_t query_granularity(const cu::Api& api, const CudaPrimaryContext& context,
                                const cu::MemAllocationProp& prop) {
  const CudaPrimaryContext::Scope scope(context, "query its allocation granularity");
  std::size_t minimum = 0;
  std::size_t recommended = 0;
  cu::Result result = api.mem_get_allocation_granularity(&minimum, &prop, cu::kMemAllocGranularityMinimum);
  if (result == cu::kSuccess)
    result = api.mem_get_allocation_granularity(&recommended, &prop, cu::kMemAllocGranularityRecommended);
  if (result != cu::kSuccess)
    throw DeviceUnavailable(fmt::format("CUDA device {}: cuMemGetAllocationGranularity failed ({})",
                                        context.device(), api.error_name(result)));
  const std::uint64_t granularity = std::max<std::uint64_t>(minimum, recommended);
  // The heap's granule arithmetic is masks; every GPU so far reports 2 MiB.
  if (!util::is_power_of_two(granularity))
    throw DeviceUnavailable(fmt::format("CUDA device {}: the driver's allocation granularity ({} bytes) is not a "
                                        "power of two, which plimsoll's heap needs",
                                        context.device(), granularity));
  return granularity;
}

}  // namespace

CudaVmmBacking::CudaVmmBacking(const cu::Api& api, cu::Device device)
    : CudaVmmBacking(api, std::make_unique<CudaPrimaryContext>(checked_api(api, device), device),
                     cu::device_allocation_prop(device)) {}

CudaVmmBacking::CudaVmmBacking(const cu::Api& api, std::unique_ptr<CudaPrimaryContext> context,
                               const cu::MemAllocationProp& prop)
    : Backing("CUDA", query_granularity(api, *context, prop)),
      api_(api),
      context_(std::move(context)),
      leaves_(api_.has_events() ? std::make_unique<CudaStreamEvents>(api_, *context_) : nullptr, "",
              "reported as out of memory"),
      copy_(api_.has_copies() ? std::make_unique<CudaDeviceCopy>(api_, *context_) : nullptr),
      prop_(prop) {}

CudaVmmBacking::~CudaVmmBacking() {
  std::vector<std::pair<std::uintptr_t, std::uint64_t>> reservations;
  ledger().for_each_reservation(
      [&](std::uintptr_t base, std::uint64_t bytes) { reservations.emplace_back(base, bytes); });
  if (handles_.empty() && reservations.empty()) return;  // the usual case: the heap gave everything back
  const CudaPrimaryContext::Scope scope(*context_, "release its memory", std::nothrow);
  api_.ctx_synchronize();
  for (const auto& [addr, handle] : handles_) {
    api_.mem_unmap(addr, granularity());
    api_.mem_release(handle);
  }
  for (const auto& [base, bytes] : reservations) api_.mem_address_free(base, bytes);
}

std::uintptr_t CudaVmmBacking::do_reserve(std::uint64_t bytes) {
  const CudaPrimaryContext::Scope scope(*context_, "reserve address space");
  cu::DevicePtr base = 0;
  if (api_.mem_address_reserve(&base, bytes, granularity(), 0, 0) != cu::kSuccess || base == 0) return 0;
  return base;
}

void CudaVmmBacking::do_unreserve(std::uintptr_t base, std::uint64_t bytes) noexcept {
  const CudaPrimaryContext::Scope scope(*context_, "free address space", std::nothrow);
  if (const cu::Result result = api_.mem_address_free(base, bytes); result != cu::kSuccess)
    abort_on_driver_failure(
        fmt::format("cuMemAddressFree of {:#x} ({} bytes) failed: {}", base, bytes, api_.error_name(result)));
}

cu::Result CudaVmmBacking::map_granule(std::uintptr_t addr, const char*& failed_call) {
  cu::MemHandle handle = 0;
  failed_call = "cuMemCreate";
  // The handle's entry first: out of host memory, std::bad_alloc before the driver acts (the heap declines for host
  // memory); made after, it left a granule mapped that nothing recorded.
  const auto slot = handles_.try_emplace(addr).first;
  cu::Result result = api_.mem_create(&handle, granularity(), &prop_, 0);
  if (result != cu::kSuccess) {
    handles_.erase(slot);
    return result;
  }
  failed_call = "cuMemMap";
  result = api_.mem_map(addr, granularity(), 0, handle, 0);
  if (result != cu::kSuccess) {
    api_.mem_release(handle);
    handles_.erase(slot);
    return result;
  }
  // A new mapping starts inaccessible to every device (cuda.h, cuMemUnmap); this device reads and writes it.
  const cu::MemAccessDesc access{.location = prop_.location, .flags = cu::kMemAccessProtReadWrite};
  failed_call = "cuMemSetAccess";
  result = api_.mem_set_access(addr, granularity(), &access, 1);
  if (result != cu::kSuccess) {
    api_.mem_unmap(addr, granularity());
    api_.mem_release(handle);
    handles_.erase(slot);
    return result;
  }
  slot->second = handle;
  return cu::kSuccess;
}

void CudaVmmBacking::unmap_granule(std::uintptr_t addr) noexcept {
  const auto found = handles_.find(addr);
  if (found == handles_.end())
    abort_on_contract_violation("CUDA", fmt::format("granule {:#x} has no allocation handle", addr));
  cu::Result result = api_.mem_unmap(addr, granularity());
  // The memory goes back to the device once it is both unmapped and released; releasing first would work
  // too, but unmapping first keeps a failed unmap from leaving a mapping to a released handle.
  if (result == cu::kSuccess) result = api_.mem_release(found->second);
  if (result != cu::kSuccess)
    abort_on_driver_failure(fmt::format("cuMemUnmap/cuMemRelease of the granule at {:#x} failed: {}", addr,
                                        api_.error_name(result)));
  handles_.erase(found);
}

bool CudaVmmBacking::do_map(std::uintptr_t addr, std::uint64_t bytes) {
  const CudaPrimaryContext::Scope scope(*context_, "map memory");
  const std::uint64_t granule = granularity();
  for (std::uint64_t offset = 0; offset < bytes; offset += granule) {
    const char* failed_call = "";
    cu::Result result = cu::kSuccess;
    try {
      result = map_granule(addr + offset, failed_call);
    } catch (const std::bad_alloc&) {  // before that granule's driver calls: the earlier ones go back, then rethrow
      for (std::uint64_t done = 0; done < offset; done += granule) unmap_granule(addr + done);
      throw;
    }
    if (result == cu::kSuccess) continue;
    // All or nothing: the heap records the whole range unmapped after a failure, so nothing may stay mapped.
    // No stream can be using granules mapped a moment ago, so no synchronization is needed first.
    for (std::uint64_t done = 0; done < offset; done += granule) unmap_granule(addr + done);
    if (result != cu::kErrorOutOfMemory) {
      leaves_.error.keep(fmt::format("CUDA device {}: {} of a {} granule at {:#x} failed: {}", context_->device(),
                                     failed_call, format_size(granule), addr + offset, api_.error_name(result)));
    }
    return false;
  }
  return true;
}

void CudaVmmBacking::do_unmap(std::uintptr_t addr, std::uint64_t bytes) noexcept {
  const CudaPrimaryContext::Scope scope(*context_, "unmap memory", std::nothrow);
  // A kernel queued before a block was freed may still be reading it, and unmapping under a running kernel is a
  // fault on the GPU, not an error code. Blocks freed on a stream reach the heap's free space only once their
  // events completed (src/engine/stream_order.hpp), so the granules are idle; a block freed without its stream
  // (or a driver without events) leaves only the whole device to wait for.
  if (leaves_.events == nullptr || leaves_.events->take_unordered_frees()) {
    if (const cu::Result result = api_.ctx_synchronize(); result != cu::kSuccess)
      abort_on_driver_failure(
          fmt::format("cuCtxSynchronize before unmapping {:#x} failed: {}", addr, api_.error_name(result)));
  }
  for (std::uint64_t offset = 0; offset < bytes; offset += granularity()) unmap_granule(addr + offset);
}

std::string CudaVmmBacking::last_driver_error() const { return leaves_.error.last(); }

BackingMemory CudaVmmBacking::do_memory() const { return context_->memory(); }

std::string CudaVmmBacking::do_describe() const {
  return fmt::format("CUDA device {} virtual memory (granularity {})", context_->device(), format_size(granularity()));
}

}  // namespace plimsoll::backings
