#include "backings/cuda_region_backing.hpp"

#include <limits>
#include <new>
#include <stdexcept>

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

std::uint64_t checked_granularity(std::uint64_t granularity) {
  if (!util::is_power_of_two(granularity))
    throw InvalidArgument(fmt::format("CUDA region granularity {} bytes is not a power of two", granularity));
  return granularity;
}

[[noreturn]] void throw_misuse(const std::string& problem) {
  throw std::logic_error("plimsoll: CUDA region backing misused (a bug in plimsoll's engine): " + problem);
}

}  // namespace

CudaRegionBacking::CudaRegionBacking(const cu::Api& api, cu::Device device, std::uint64_t granularity)
    : api_(checked_api(api, device)),
      context_(api_, device),
      events_(api_.has_events() ? std::make_unique<CudaStreamEvents>(api_, context_) : nullptr),
      granularity_(checked_granularity(granularity)),
      ledger_(granularity_) {}

CudaRegionBacking::~CudaRegionBacking() {
  const std::lock_guard lock(mutex_);
  if (allocations_.empty()) return;
  const CudaPrimaryContext::Scope scope(context_, "free its memory", std::nothrow);
  api_.ctx_synchronize();
  for (const auto& [base, raw] : allocations_) api_.mem_free(raw);
}

std::uintptr_t CudaRegionBacking::reserve(std::uint64_t bytes) {
  const std::lock_guard lock(mutex_);
  if (auto problem = ledger_.reserve_problem(bytes); !problem.empty()) throw_misuse(problem);
  const CudaPrimaryContext::Scope scope(context_, "allocate memory");
  cu::DevicePtr raw = 0;
  if (api_.mem_alloc(&raw, bytes) != cu::kSuccess) return 0;
  std::uintptr_t base = raw;
  // The driver aligns large allocations to 2 MiB in practice but promises only 256 bytes; the heap's granule
  // arithmetic needs the base aligned, so a misaligned allocation is redone with a granule of slack.
  if (!util::is_aligned(base, granularity_)) {
    api_.mem_free(raw);
    if (bytes > std::numeric_limits<std::uint64_t>::max() - granularity_) return 0;
    if (api_.mem_alloc(&raw, bytes + granularity_) != cu::kSuccess) return 0;
    base = util::align_up(raw, granularity_);
  }
  ledger_.record_reserve(base, bytes);
  allocations_.emplace(base, raw);
  return base;
}

void CudaRegionBacking::unreserve(std::uintptr_t base, std::uint64_t bytes) noexcept {
  const std::lock_guard lock(mutex_);
  if (auto problem = ledger_.unreserve_problem(base, bytes); !problem.empty())
    abort_on_contract_violation("CUDA region", problem);
  ledger_.record_unreserve(base, bytes);  // mapped granules are bookkeeping here: nothing to check
  const auto found = allocations_.find(base);
  const CudaPrimaryContext::Scope scope(context_, "free memory", std::nothrow);
  // A kernel queued before the heap let go may still use the memory; cuMemFree does not promise to wait.
  api_.ctx_synchronize();
  if (const cu::Result result = api_.mem_free(found->second); result != cu::kSuccess)
    abort_on_driver_failure(fmt::format("cuMemFree of {:#x} failed: {}", found->second, api_.error_name(result)));
  allocations_.erase(found);
}

bool CudaRegionBacking::map(std::uintptr_t addr, std::uint64_t bytes) {
  const std::lock_guard lock(mutex_);
  if (auto problem = ledger_.map_problem(addr, bytes); !problem.empty()) throw_misuse(problem);
  ledger_.record_map(addr, bytes);
  return true;
}

void CudaRegionBacking::unmap(std::uintptr_t addr, std::uint64_t bytes) noexcept {
  const std::lock_guard lock(mutex_);
  if (auto problem = ledger_.unmap_problem(addr, bytes); !problem.empty())
    abort_on_contract_violation("CUDA region", problem);
  ledger_.record_unmap(addr, bytes);
}

BackingMemory CudaRegionBacking::memory() const { return context_.memory(); }

std::string CudaRegionBacking::describe() const {
  return fmt::format("CUDA device {} plain memory (cuMemAlloc, no virtual memory management)", context_.device());
}

}  // namespace plimsoll::backings
