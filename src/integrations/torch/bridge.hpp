#pragma once
// What the C++17 libtorch side (cpu_allocator.cpp) needs from plimsoll's C++20 engine, behind declarations that
// compile as C++17. plimsoll's allocator.hpp cannot be included there: device.hpp and policy.hpp use C++20
// defaulted comparisons. bridge.cpp, compiled as C++20, implements these over Allocator and Runtime::global().
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace plimsoll {
class Allocator;
}

namespace plimsoll::torch::bridge {

/// Every pointer Allocator::allocate returns is aligned to at least this (allocator.hpp).
inline constexpr std::size_t kAlignment = 256;

/// Allocator::allocate; throws plimsoll::OutOfMemory (oom.hpp, C++17-clean) and plimsoll::Error.
void* allocate(Allocator& device, std::size_t bytes, std::uint16_t tag);
/// Allocator::deallocate; throws plimsoll::InvalidFree for an address that is not live.
void deallocate(Allocator& device, void* ptr);
/// Allocator::usage(): the device's totals, for c10's memory reporting.
struct Totals {
  std::uint64_t in_use_bytes = 0;
  std::uint64_t reserved_bytes = 0;
};
Totals totals(const Allocator& device);
/// Runtime::global().device(name).
Allocator& global_device(std::string_view name);
/// Returns `device` when it is a host device ("cpu", "cpu/K"); throws plimsoll::InvalidArgument for a simulated or
/// CUDA device, whose addresses a CPU tensor cannot be written through.
Allocator& require_host(Allocator& device);
/// intern_tag and tag_name (allocator.hpp).
std::uint16_t intern_tag(std::string_view name);
std::string_view tag_name(std::uint16_t tag);

}  // namespace plimsoll::torch::bridge
