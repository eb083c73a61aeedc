// libplimsoll_cuda_intercept.so: the CUDA driver's memory calls, replaced for a job preloaded with this library
// (docs/sharing.md). Each wrapper asks sharing::DriverGovernor, then calls the real driver (real_driver.cpp). The
// job reaches these wrappers three ways: by name (the preload comes first in symbol lookup), through dlsym on
// libcuda.so.1 (our dlsym hands back the wrapper for a driver entry point), and through cuGetProcAddress (ours hands
// back the wrapper for the entry point the real one returned), which is how the CUDA runtime finds every call.
#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <optional>
#include <string_view>

#include "elf_lookup.hpp"
#include "governor_fork_participant.hpp"
#include "real_driver.hpp"
#include "sharing/driver_governor.hpp"
#include "sharing/interposer_presence.hpp"

namespace plimsoll::cuda_intercept {

namespace {

constexpr cu::Result kErrorNotFound = 500;  // CUDA_ERROR_NOT_FOUND: the real driver lacks this entry point

// Never destroyed, like the governor it takes around fork().
GovernorForkParticipant& fork_participant() {
  static auto* const participant = new GovernorForkParticipant;
  return *participant;
}

// At load, before the job can load an engine of its own (governor_fork_participant.hpp says why it must be first);
// only in a governed job (PLIMSOLL_SHARE set, as DriverGovernor::from_environment reads it): another has no governor
// locks, and its forks pay for no handlers. Out of host memory at load, the governor goes without it (its locks then
// not held across fork(), as before).
[[gnu::constructor]] void register_governor_for_fork() noexcept {
  if (std::getenv("PLIMSOLL_SHARE") == nullptr) return;
  try {
    engine::register_fork_participant(fork_participant());
  } catch (...) {
  }
}

sharing::DriverGovernor& governor() {
  static sharing::DriverGovernor* instance = [] {
    const RealDriver& d = real();
    // Never destroyed: the job may allocate from its own static destructors after ours would have run. Its
    // ledger entry is reclaimed as a dead process's when it exits.
    sharing::DriverGovernor* made =
        sharing::DriverGovernor::from_environment(
            sharing::DriverCalls{.ctx_get_device = d.ctx_get_device, .device_get_uuid = d.device_get_uuid,
                                 .device_total_mem = d.device_total_mem, .mem_get_info = d.mem_get_info})
            .release();
    fork_participant().watch(*made);
    return made;
  }();
  return *instance;
}

// The wrappers are called from C (libcudart, the framework): nothing may unwind into them. A fault of plimsoll's own
// (the ledger's lock failing, memory exhausted while writing the report) is said once on stderr; an admission that
// faults is refused (a cap that a fault could pass would not be a cap), bookkeeping after the driver's own call is
// skipped (the job keeps what the driver gave it).
void report_fault(const char* call, const char* what) noexcept {
  static std::atomic<bool> said{false};
  if (said.exchange(true)) return;
  std::fprintf(stderr, "plimsoll: the CUDA interposer failed inside %s (%s); its accounting may be off from here on\n",
               call, what);
}

template <typename Body>
void guarded(const char* call, Body&& body) noexcept {
  try {
    body();
  } catch (const std::exception& error) {
    report_fault(call, error.what());
  } catch (...) {
    report_fault(call, "an unknown exception");
  }
}

// An allocation returning an address: admitted on the calling context's device, then made, then remembered.
template <typename Allocate>
cu::Result allocate(cu::DevicePtr* pointer, std::uint64_t bytes, const char* call, Allocate&& make) noexcept {
  sharing::DriverGovernor* g = nullptr;
  std::optional<int> device;
  cu::Result refused = cu::kSuccess;
  bool faulted = true;
  guarded(call, [&] {
    g = &governor();
    device = g->governed() ? g->current_device() : std::nullopt;
    if (device) refused = g->admit(*device, bytes, call);
    faulted = false;
  });
  if (faulted) return cu::kErrorOutOfMemory;
  if (!device) return make();  // not governed, or no context (the driver says so itself)
  if (refused != cu::kSuccess) return refused;
  const cu::Result result = make();
  guarded(call, [&] {
    if (result != cu::kSuccess || pointer == nullptr) {
      g->cancel(*device, bytes);
    } else {
      g->remember(*pointer, *device, bytes, false);
    }
  });
  return result;
}

template <typename Free>
cu::Result release(std::uint64_t key, bool is_handle, Free&& free) noexcept {
  sharing::DriverGovernor* g = nullptr;
  std::optional<sharing::Charged> charged;
  guarded("a free", [&] {
    g = &governor();
    charged = g->take(key, is_handle);
  });
  const cu::Result result = free();
  if (charged) {
    guarded("a free", [&] {
      if (result == cu::kSuccess) g->credit(*charged);
      else g->remember(key, charged->device, charged->bytes, is_handle);
    });
  }
  return result;
}

void measure_context(cu::Context context, bool push) {
  sharing::DriverGovernor& g = governor();
  const RealDriver& d = real();
  if (push && (d.ctx_push_current == nullptr || d.ctx_push_current(context) != cu::kSuccess)) return;
  if (const auto device = g.current_device()) g.context_created(*device);
  cu::Context popped = nullptr;
  if (push) d.ctx_pop_current(&popped);
}

// A context creation: the GPU's context token around it, then its cost measured (`push`: the new context is not
// current yet, as after cuDevicePrimaryCtxRetain).
template <typename Create>
cu::Result create_context(cu::Device device, bool push, cu::Context* context, Create&& create) noexcept {
  sharing::DriverGovernor* g = nullptr;
  bool governed = false;
  guarded("a context's creation", [&] {
    g = &governor();
    governed = g->governed();
    if (governed) g->context_creating(device);
  });
  if (!governed) return create();
  const cu::Result result = create();
  guarded("a context's creation", [&] {
    if (result == cu::kSuccess && context != nullptr) measure_context(*context, push);
    g->context_done(device);
  });
  return result;
}

}  // namespace

}  // namespace plimsoll::cuda_intercept

using namespace plimsoll::cuda_intercept;  // NOLINT: the wrappers below must have the driver's global names
namespace cu = plimsoll::cuda_driver;
namespace sharing = plimsoll::sharing;

#define PLIMSOLL_EXPORT extern "C" __attribute__((visibility("default")))
#define PLIMSOLL_REAL(member)         \
  const auto real_call = real().member; \
  if (real_call == nullptr) return kErrorNotFound

// Says "plimsoll's interposer is loaded" to a Runtime in this process (sharing::memory_calls_interposed), which then
// leaves its GPUs' ledger entries to it; a shim of someone else's that wraps the same driver calls has no such name.
PLIMSOLL_EXPORT int plimsoll_cuda_intercept_present() { return 1; }
static_assert(std::string_view(sharing::kInterposerMarker) == "plimsoll_cuda_intercept_present");

PLIMSOLL_EXPORT cu::Result cuMemAlloc_v2(cu::DevicePtr* pointer, std::size_t bytes) {
  PLIMSOLL_REAL(mem_alloc);
  return allocate(pointer, bytes, "cuMemAlloc", [&] { return real_call(pointer, bytes); });
}
PLIMSOLL_EXPORT cu::Result cuMemFree_v2(cu::DevicePtr pointer) {
  PLIMSOLL_REAL(mem_free);
  return release(pointer, false, [&] { return real_call(pointer); });
}
PLIMSOLL_EXPORT cu::Result cuMemAllocPitch_v2(cu::DevicePtr* pointer, std::size_t* pitch, std::size_t width,
                                              std::size_t height, unsigned int element_bytes) {
  PLIMSOLL_REAL(mem_alloc_pitch);
  // The pitch is known only afterwards: admit the unpadded size, then charge the padding too (rows are padded to
  // at most 512 bytes, so an estimate that rounds each row up to 512 is never below what the driver takes).
  const std::uint64_t estimate = (width + 511) / 512 * 512 * height;
  return allocate(pointer, estimate, "cuMemAllocPitch",
                  [&] { return real_call(pointer, pitch, width, height, element_bytes); });
}
// Managed memory is counted (charged like device memory, though the driver could page it out to the host): a cap
// that managed memory could silently pass would not be a cap.
PLIMSOLL_EXPORT cu::Result cuMemAllocManaged(cu::DevicePtr* pointer, std::size_t bytes, unsigned int flags) {
  PLIMSOLL_REAL(mem_alloc_managed);
  return allocate(pointer, bytes, "cuMemAllocManaged", [&] { return real_call(pointer, bytes, flags); });
}
PLIMSOLL_EXPORT cu::Result cuMemCreate(cu::MemHandle* handle, std::size_t bytes, const cu::MemAllocationProp* prop,
                                       unsigned long long flags) {
  PLIMSOLL_REAL(mem_create);
  sharing::DriverGovernor* g = nullptr;
  bool governed = false;
  bool faulted = true;
  cu::Result refused = cu::kSuccess;
  const bool on_device = prop != nullptr && prop->location.type == cu::kMemLocationTypeDevice;
  const int device = on_device ? prop->location.id : -1;
  guarded("cuMemCreate", [&] {
    g = &governor();
    governed = g->governed() && on_device;
    if (governed) refused = g->admit(device, bytes, "cuMemCreate");
    faulted = false;
  });
  if (faulted) return cu::kErrorOutOfMemory;
  if (!governed) return real_call(handle, bytes, prop, flags);
  if (refused != cu::kSuccess) return refused;
  const cu::Result result = real_call(handle, bytes, prop, flags);
  guarded("cuMemCreate", [&] {
    if (result != cu::kSuccess || handle == nullptr) {
      g->cancel(device, bytes);
    } else {
      g->remember(*handle, device, bytes, true);
    }
  });
  return result;
}
PLIMSOLL_EXPORT cu::Result cuMemRelease(cu::MemHandle handle) {
  PLIMSOLL_REAL(mem_release);
  return release(handle, true, [&] { return real_call(handle); });
}
// Stream-ordered allocations are charged when asked for and credited when their free is enqueued.
PLIMSOLL_EXPORT cu::Result cuMemAllocAsync(cu::DevicePtr* pointer, std::size_t bytes, cu::Stream stream) {
  PLIMSOLL_REAL(mem_alloc_async);
  return allocate(pointer, bytes, "cuMemAllocAsync", [&] { return real_call(pointer, bytes, stream); });
}
PLIMSOLL_EXPORT cu::Result cuMemAllocAsync_ptsz(cu::DevicePtr* pointer, std::size_t bytes, cu::Stream stream) {
  PLIMSOLL_REAL(mem_alloc_async_ptsz);
  return allocate(pointer, bytes, "cuMemAllocAsync", [&] { return real_call(pointer, bytes, stream); });
}
PLIMSOLL_EXPORT cu::Result cuMemAllocFromPoolAsync(cu::DevicePtr* pointer, std::size_t bytes, Pool pool,
                                                   cu::Stream stream) {
  PLIMSOLL_REAL(mem_alloc_from_pool_async);
  return allocate(pointer, bytes, "cuMemAllocFromPoolAsync", [&] { return real_call(pointer, bytes, pool, stream); });
}
PLIMSOLL_EXPORT cu::Result cuMemAllocFromPoolAsync_ptsz(cu::DevicePtr* pointer, std::size_t bytes, Pool pool,
                                                        cu::Stream stream) {
  PLIMSOLL_REAL(mem_alloc_from_pool_async_ptsz);
  return allocate(pointer, bytes, "cuMemAllocFromPoolAsync", [&] { return real_call(pointer, bytes, pool, stream); });
}
PLIMSOLL_EXPORT cu::Result cuMemFreeAsync(cu::DevicePtr pointer, cu::Stream stream) {
  PLIMSOLL_REAL(mem_free_async);
  return release(pointer, false, [&] { return real_call(pointer, stream); });
}
PLIMSOLL_EXPORT cu::Result cuMemFreeAsync_ptsz(cu::DevicePtr pointer, cu::Stream stream) {
  PLIMSOLL_REAL(mem_free_async_ptsz);
  return release(pointer, false, [&] { return real_call(pointer, stream); });
}

// What the job believes the GPU has: its budget.
PLIMSOLL_EXPORT cu::Result cuMemGetInfo_v2(std::size_t* free_bytes, std::size_t* total_bytes) {
  PLIMSOLL_REAL(mem_get_info);
  const cu::Result result = real_call(free_bytes, total_bytes);
  if (result != cu::kSuccess || free_bytes == nullptr || total_bytes == nullptr) return result;
  guarded("cuMemGetInfo", [&] {
    sharing::DriverGovernor& g = governor();
    if (!g.governed()) return;
    if (const auto device = g.current_device()) {
      if (const auto budget = g.memory_info(*device, *free_bytes)) {
        *free_bytes = budget->first;
        *total_bytes = budget->second;
      }
    }
  });
  return result;
}
PLIMSOLL_EXPORT cu::Result cuDeviceTotalMem_v2(std::size_t* bytes, cu::Device device) {
  PLIMSOLL_REAL(device_total_mem);
  const cu::Result result = real_call(bytes, device);
  if (result != cu::kSuccess || bytes == nullptr) return result;
  guarded("cuDeviceTotalMem", [&] {
    sharing::DriverGovernor& g = governor();
    if (!g.governed()) return;
    if (const auto cap = g.total_memory(device)) *bytes = *cap;
  });
  return result;
}

// Contexts: their cost is measured once and charged.
PLIMSOLL_EXPORT cu::Result cuCtxCreate_v2(cu::Context* context, unsigned int flags, cu::Device device) {
  PLIMSOLL_REAL(ctx_create_v2);
  return create_context(device, false, context, [&] { return real_call(context, flags, device); });
}
PLIMSOLL_EXPORT cu::Result cuCtxCreate_v3(cu::Context* context, void* params, int count, unsigned int flags,
                                          cu::Device device) {
  PLIMSOLL_REAL(ctx_create_v3);
  return create_context(device, false, context, [&] { return real_call(context, params, count, flags, device); });
}
PLIMSOLL_EXPORT cu::Result cuCtxCreate_v4(cu::Context* context, void* params, unsigned int flags, cu::Device device) {
  PLIMSOLL_REAL(ctx_create_v4);
  return create_context(device, false, context, [&] { return real_call(context, params, flags, device); });
}
PLIMSOLL_EXPORT cu::Result cuDevicePrimaryCtxRetain(cu::Context* context, cu::Device device) {
  PLIMSOLL_REAL(primary_ctx_retain);
  return create_context(device, true, context, [&] { return real_call(context, device); });
}

// The two ways around the exported names.
PLIMSOLL_EXPORT cu::Result cuGetProcAddress(const char* symbol, void** function, int version,
                                            unsigned long long flags) {
  PLIMSOLL_REAL(get_proc_address);
  const cu::Result result = real_call(symbol, function, version, flags);
  if (result == cu::kSuccess && function != nullptr) *function = substitute(*function);
  return result;
}
PLIMSOLL_EXPORT cu::Result cuGetProcAddress_v2(const char* symbol, void** function, int version,
                                               unsigned long long flags, int* status) {
  PLIMSOLL_REAL(get_proc_address_v2);
  const cu::Result result = real_call(symbol, function, version, flags, status);
  if (result == cu::kSuccess && function != nullptr) *function = substitute(*function);
  return result;
}

// RTLD_NEXT means "after the object that called dlsym", and the caller glibc sees is now this library: asked as is,
// it would hand a later preload (a profiler wrapping malloc) its own symbol back. So the loader's rule is computed
// here for the real caller, from the objects' own symbol tables (elf_lookup.hpp): nothing is opened, nothing
// allocated, so a tool that wraps dlopen or malloc and asks for the real one while it starts is answered.
PLIMSOLL_EXPORT PLIMSOLL_UNINSTRUMENTED void* dlsym(void* handle, const char* symbol) {
  if (handle != RTLD_NEXT) return substitute_named(symbol, real_dlsym(handle, symbol));
  return substitute_named(symbol, plimsoll::elf_lookup::next_definition(__builtin_return_address(0), symbol));
}

namespace plimsoll::cuda_intercept {

template <typename Function>
void* address_of(Function* function) {
  return reinterpret_cast<void*>(function);
}

const Wrapper kWrappers[] = {
    {"cuMemAlloc_v2", address_of(cuMemAlloc_v2)},
    {"cuMemFree_v2", address_of(cuMemFree_v2)},
    {"cuMemAllocPitch_v2", address_of(cuMemAllocPitch_v2)},
    {"cuMemAllocManaged", address_of(cuMemAllocManaged)},
    {"cuMemCreate", address_of(cuMemCreate)},
    {"cuMemRelease", address_of(cuMemRelease)},
    {"cuMemAllocAsync", address_of(cuMemAllocAsync)},
    {"cuMemAllocAsync_ptsz", address_of(cuMemAllocAsync_ptsz)},
    {"cuMemAllocFromPoolAsync", address_of(cuMemAllocFromPoolAsync)},
    {"cuMemAllocFromPoolAsync_ptsz", address_of(cuMemAllocFromPoolAsync_ptsz)},
    {"cuMemFreeAsync", address_of(cuMemFreeAsync)},
    {"cuMemFreeAsync_ptsz", address_of(cuMemFreeAsync_ptsz)},
    {"cuMemGetInfo_v2", address_of(cuMemGetInfo_v2)},
    {"cuDeviceTotalMem_v2", address_of(cuDeviceTotalMem_v2)},
    {"cuCtxCreate_v2", address_of(cuCtxCreate_v2)},
    {"cuCtxCreate_v3", address_of(cuCtxCreate_v3)},
    {"cuCtxCreate_v4", address_of(cuCtxCreate_v4)},
    {"cuDevicePrimaryCtxRetain", address_of(cuDevicePrimaryCtxRetain)},
    {"cuGetProcAddress", address_of(cuGetProcAddress)},
    {"cuGetProcAddress_v2", address_of(cuGetProcAddress_v2)},
};
const std::size_t kWrapperCount = sizeof kWrappers / sizeof kWrappers[0];

}  // namespace plimsoll::cuda_intercept
