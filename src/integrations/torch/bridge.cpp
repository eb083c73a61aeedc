// The C++20 half of plimsoll_torch: bridge.hpp over Allocator and Runtime (see bridge.hpp for why).
#include "bridge.hpp"

#include <string>
#include <type_traits>

#include "plimsoll/allocator.hpp"
#include "plimsoll/error.hpp"
#include "plimsoll/runtime.hpp"

namespace plimsoll::torch::bridge {

static_assert(std::is_same_v<Tag, std::uint16_t>, "bridge.hpp passes tags as std::uint16_t");

void* allocate(Allocator& device, std::size_t bytes, std::uint16_t tag) { return device.allocate(bytes, tag); }

void deallocate(Allocator& device, void* ptr) { device.deallocate(ptr); }

Totals totals(const Allocator& device) {
  const MemoryUsage usage = device.usage();
  return Totals{usage.in_use_bytes, usage.reserved_bytes};
}

Allocator& global_device(std::string_view name) { return Runtime::global().device(name); }

Allocator& require_host(Allocator& device) {
  const std::string name = device.description().name;
  if (DeviceName::parse(name).kind != DeviceKind::cpu) {
    throw InvalidArgument("plimsoll::torch: " + name + " cannot hold CPU tensors (libtorch writes to their memory, "
                          "and this device's addresses are not host memory); use a host device: \"cpu\" or \"cpu/K\"");
  }
  return device;
}

std::uint16_t intern_tag(std::string_view name) { return plimsoll::intern_tag(name); }

std::string_view tag_name(std::uint16_t tag) { return plimsoll::tag_name(tag); }

}  // namespace plimsoll::torch::bridge
