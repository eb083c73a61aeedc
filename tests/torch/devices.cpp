// C++20 side of devices.hpp.
#include "devices.hpp"

#include "plimsoll/runtime.hpp"

namespace plimsoll::torch_test {
namespace {

Runtime& runtime() {
  static Runtime* const instance = [] {
    Config config;
    config.log_device_creation = false;
    config.logical_devices["cpu"] = {{std::uint64_t{1} << 30}, {std::uint64_t{1} << 30}, {kSmallLimit}};
    return new Runtime(config);
  }();
  return *instance;
}

}  // namespace

Allocator& main_device() { return runtime().device("cpu/0"); }
Allocator& other_device() { return runtime().device("cpu/1"); }
Allocator& small_device() { return runtime().device("cpu/2"); }

Usage usage(const Allocator& device) {
  const Stats stats = device.stats();
  return {stats.in_use_bytes, stats.requested_bytes, stats.live_allocations, stats.ooms};
}

bool owns(const Allocator& device, const void* ptr) { return device.owns(ptr); }

std::uint64_t tag_in_use(const Allocator& device, std::string_view tag) {
  for (const TagStats& t : device.stats().tags) {
    if (t.tag == tag) return t.in_use_bytes;
  }
  return 0;
}

}  // namespace plimsoll::torch_test
