#pragma once
// Host memory handled like CUDA virtual memory: address space is reserved without RAM, granules are made
// usable (map) and handed back to the kernel (unmap) as the engine's heap grows and shrinks.
#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

#include "backings/backing.hpp"
#include "backings/granules.hpp"
#include "backings/mapping_ledger.hpp"

namespace plimsoll::backings {

class HostBacking final : public Backing {
 public:
  /// `granularity`: a power-of-two multiple of the page size. `capacity_bytes`: the most this backing maps
  /// at once; by default the host's limit (RAM, or the cgroup limit when lower). Throws InvalidArgument.
  explicit HostBacking(std::uint64_t granularity = kDefaultGranularity,
                       std::optional<std::uint64_t> capacity_bytes = std::nullopt);
  /// Releases reservations the engine left behind.
  ~HostBacking() override;
  HostBacking(const HostBacking&) = delete;
  HostBacking& operator=(const HostBacking&) = delete;

  std::uintptr_t reserve(std::uint64_t bytes) override;
  void unreserve(std::uintptr_t base, std::uint64_t bytes) noexcept override;
  bool map(std::uintptr_t addr, std::uint64_t bytes) override;
  void unmap(std::uintptr_t addr, std::uint64_t bytes) noexcept override;

  std::uint64_t granularity() const noexcept override { return granularity_; }
  std::uint64_t capacity() const noexcept { return capacity_; }
  BackingMemory memory() const override;
  HostPages host_pages() const override;
  bool touchable() const noexcept override { return true; }
  std::string describe() const override;

 private:
  std::uint64_t resident_bytes_locked() const;

  const std::uint64_t granularity_;
  const std::uint64_t capacity_;
  const std::uint64_t page_size_;
  // Stats are read from other threads while the engine maps; the counter needs no lock, the ledger does.
  std::atomic<std::uint64_t> committed_{0};
  mutable std::mutex mutex_;
  MappingLedger ledger_;
};

}  // namespace plimsoll::backings
