#include "sharing/interposer_presence.hpp"

#include <dlfcn.h>

#include <bit>
#include <cstdlib>

namespace plimsoll::sharing {

namespace {

template <typename Function>
const void* object_of(Function function) {
  if (function == nullptr) return nullptr;
  Dl_info info{};
  // POSIX guarantees function and data pointers convert.
  if (::dladdr(std::bit_cast<const void*>(function), &info) == 0) return nullptr;
  return info.dli_fbase;
}

}  // namespace

bool memory_calls_interposed(const cuda_driver::Api& api) {
  // The object exporting the marker must be the one serving the allocations: with another shim preloaded before the
  // interposer (LD_PRELOAD="foreign.so libplimsoll_cuda_intercept.so"), the marker is loaded but the calls bind to
  // the foreign shim, which charges nothing.
  const void* interposer = object_of(::dlsym(RTLD_DEFAULT, kInterposerMarker));
  const void* driver = object_of(api.init);
  if (interposer == nullptr || driver == nullptr || interposer == driver) return false;
  bool served = false;
  for (const void* allocation : {object_of(api.mem_create), object_of(api.mem_alloc)}) {
    if (allocation == nullptr) continue;  // an entry point this driver lacks
    if (allocation != interposer) return false;
    served = true;
  }
  return served;
}

bool interposer_governs(const cuda_driver::Api& api) {
  const char* shares = std::getenv("PLIMSOLL_SHARE");
  return shares != nullptr && *shares != '\0' && memory_calls_interposed(api);
}

}  // namespace plimsoll::sharing
