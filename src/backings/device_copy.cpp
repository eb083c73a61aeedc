#include "backings/device_copy.hpp"

#include <cstring>
#include <new>

namespace plimsoll::backings {
namespace {

class TouchableMemoryCopy final : public DeviceCopy {
 public:
  void* allocate_host(std::uint64_t bytes) noexcept override { return ::operator new(bytes, std::nothrow); }
  void free_host(void* host, std::uint64_t) noexcept override { ::operator delete(host); }
  std::string to_host(void* host, std::uintptr_t device, std::uint64_t bytes) override {
    std::memcpy(host, reinterpret_cast<const void*>(device), bytes);
    return {};
  }
  std::string to_device(std::uintptr_t device, const void* host, std::uint64_t bytes) override {
    std::memcpy(reinterpret_cast<void*>(device), host, bytes);
    return {};
  }
};

}  // namespace

DeviceCopy& touchable_memory_copy() noexcept {
  static TouchableMemoryCopy copy;
  return copy;
}

}  // namespace plimsoll::backings
