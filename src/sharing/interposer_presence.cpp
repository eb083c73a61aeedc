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
  if (::dlsym(RTLD_DEFAULT, kInterposerMarker) == nullptr) return false;
  const void* driver = object_of(api.init);
  if (driver == nullptr) return false;
  for (const void* allocation : {object_of(api.mem_create), object_of(api.mem_alloc)})
    if (allocation != nullptr && allocation != driver) return true;
  return false;
}

bool interposer_governs(const cuda_driver::Api& api) {
  const char* shares = std::getenv("PLIMSOLL_SHARE");
  return shares != nullptr && *shares != '\0' && memory_calls_interposed(api);
}

}  // namespace plimsoll::sharing
