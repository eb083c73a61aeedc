#pragma once
// A simulated device: the engine's whole life cycle (reserve, map, unmap, out of memory) with no memory
// behind it. Addresses are made up and never dereferenced, so a laptop can replay an 80 GiB GPU's trace.
// Every call is checked: a wrong one is an engine bug, and this is the backing the engine's tests run on.
#include <atomic>
#include <cstdint>
#include <string>

#include "backings/backing.hpp"
#include "backings/granules.hpp"

namespace plimsoll::backings {

class SimBacking final : public Backing {
 public:
  /// Above every address Linux hands out unasked (47 bits on x86-64, 48 on arm64), so a simulated address
  /// can never be mistaken for real memory, and below the top byte that tagged pointers use.
  static constexpr std::uintptr_t kFirstAddress = std::uintptr_t{1} << 48;
  static constexpr std::uintptr_t kAddressLimit = std::uintptr_t{1} << 56;

  /// Throws InvalidArgument when `capacity_bytes` is 0 or `granularity` is not a power of two.
  explicit SimBacking(std::uint64_t capacity_bytes, std::uint64_t granularity = kDefaultGranularity);

  /// Simulates other processes holding `bytes` of the device (for "device taken" out-of-memory causes).
  void set_occupied_by_others(std::uint64_t bytes) noexcept { occupied_by_others_.store(bytes); }
  std::uint64_t occupied_by_others() const noexcept { return occupied_by_others_.load(); }
  std::uint64_t capacity() const noexcept { return capacity_; }

 private:
  std::uintptr_t do_reserve(std::uint64_t bytes) override;
  void do_unreserve(std::uintptr_t, std::uint64_t) noexcept override {}  // made-up addresses: nothing to free
  bool do_map(std::uintptr_t addr, std::uint64_t bytes) override;
  void do_unmap(std::uintptr_t, std::uint64_t) noexcept override {}
  BackingMemory do_memory() const override;
  bool do_touchable() const noexcept override { return false; }
  std::string do_describe() const override;

  std::uint64_t available_to_us() const noexcept;

  const std::uint64_t capacity_;
  std::atomic<std::uint64_t> occupied_by_others_{0};
  std::uintptr_t next_address_;  // guarded by the backing's lock (used only in do_reserve)
};

}  // namespace plimsoll::backings
