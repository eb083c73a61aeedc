#pragma once
// The plimsoll devices integrations_torch_test uses, behind declarations that compile as C++17 (runtime.hpp is
// C++20). One runtime for the process, never destroyed: tensors may outlive any test's scope.
#include <cstdint>
#include <string_view>

namespace plimsoll {
class Allocator;
}

namespace plimsoll::torch_test {

inline constexpr std::uint64_t kSmallLimit = std::uint64_t{8} << 20;

Allocator& main_device();   // cpu/0, 1 GiB: the default device of the tests
Allocator& other_device();  // cpu/1, 1 GiB: the one DeviceScope selects
Allocator& small_device();  // cpu/2, kSmallLimit: for out-of-memory

struct Usage {
  std::uint64_t in_use_bytes = 0;     // rounded
  std::uint64_t requested_bytes = 0;  // as asked for
  std::uint64_t live_allocations = 0;
  std::uint64_t ooms = 0;
};
Usage usage(const Allocator& device);
/// Allocator::owns: `ptr` is the start of a live allocation of `device`.
bool owns(const Allocator& device, const void* ptr);
/// Bytes in use under `tag` on `device` (0 when the tag holds nothing there).
std::uint64_t tag_in_use(const Allocator& device, std::string_view tag);

}  // namespace plimsoll::torch_test
