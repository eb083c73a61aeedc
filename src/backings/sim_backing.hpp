#pragma once
// A simulated device: the engine's whole life cycle (reserve, map, unmap, out of memory) with no memory
// behind it. Addresses are made up and never dereferenced, so a laptop can replay an 80 GiB GPU's trace.
// Every call is checked: a wrong one is an engine bug, and this is the backing the engine's tests run on.
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

#include "backings/backing.hpp"
#include "backings/granules.hpp"
#include "backings/mapping_ledger.hpp"

namespace plimsoll::backings {

class SimBacking final : public Backing {
 public:
  /// Above every address Linux hands out unasked (47 bits on x86-64, 48 on arm64), so a simulated address
  /// can never be mistaken for real memory, and below the top byte that tagged pointers use.
  static constexpr std::uintptr_t kFirstAddress = std::uintptr_t{1} << 48;
  static constexpr std::uintptr_t kAddressLimit = std::uintptr_t{1} << 56;

  /// Throws InvalidArgument when `capacity_bytes` is 0 or `granularity` is not a power of two.
  explicit SimBacking(std::uint64_t capacity_bytes, std::uint64_t granularity = kDefaultGranularity);
  SimBacking(const SimBacking&) = delete;
  SimBacking& operator=(const SimBacking&) = delete;

  /// Throws std::logic_error when `bytes` is not a non-zero multiple of the granularity.
  std::uintptr_t reserve(std::uint64_t bytes) override;
  /// Aborts when [base, bytes) is not a reservation or still has mapped granules (CUDA refuses that too).
  void unreserve(std::uintptr_t base, std::uint64_t bytes) noexcept override;
  /// Throws std::logic_error on a misaligned range, one outside a reservation, or one already mapped.
  bool map(std::uintptr_t addr, std::uint64_t bytes) override;
  /// Aborts on a misaligned range, one outside a reservation, or one not entirely mapped.
  void unmap(std::uintptr_t addr, std::uint64_t bytes) noexcept override;

  /// Simulates other processes holding `bytes` of the device (for "device taken" out-of-memory causes).
  void set_occupied_by_others(std::uint64_t bytes) noexcept { occupied_by_others_.store(bytes); }
  std::uint64_t occupied_by_others() const noexcept { return occupied_by_others_.load(); }
  std::uint64_t mapped_bytes() const noexcept { return mapped_.load(); }
  std::uint64_t capacity() const noexcept { return capacity_; }

  std::uint64_t granularity() const noexcept override { return granularity_; }
  BackingMemory memory() const override;
  bool touchable() const noexcept override { return false; }
  std::string describe() const override;

 private:
  std::uint64_t available_to_us() const noexcept;

  const std::uint64_t capacity_;
  const std::uint64_t granularity_;
  std::atomic<std::uint64_t> mapped_{0};
  std::atomic<std::uint64_t> occupied_by_others_{0};
  mutable std::mutex mutex_;
  std::uintptr_t next_address_ = kFirstAddress;
  MappingLedger ledger_;
};

}  // namespace plimsoll::backings
