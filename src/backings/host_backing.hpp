#pragma once
// Host memory handled like CUDA virtual memory: address space is reserved without RAM, granules are made
// usable (map) and handed back to the kernel (unmap) as the engine's heap grows and shrinks.
#include <cstdint>
#include <optional>
#include <string>

#include "backings/backing.hpp"
#include "backings/granules.hpp"

namespace plimsoll::backings {

class HostBacking final : public Backing {
 public:
  /// `granularity`: a power-of-two multiple of the page size. `capacity_bytes`: the most this backing maps
  /// at once; by default the host's limit (RAM, or the cgroup limit when lower). Throws InvalidArgument.
  explicit HostBacking(std::uint64_t granularity = kDefaultGranularity,
                       std::optional<std::uint64_t> capacity_bytes = std::nullopt);
  /// Releases reservations the engine left behind.
  ~HostBacking() override;

  std::uint64_t capacity() const noexcept { return capacity_; }

 private:
  std::uintptr_t do_reserve(std::uint64_t bytes) override;
  /// munmap of the whole reservation (nothing inside is mapped: the contract).
  void do_unreserve(std::uintptr_t base, std::uint64_t bytes) noexcept override;
  bool do_map(std::uintptr_t addr, std::uint64_t bytes) override;
  void do_unmap(std::uintptr_t addr, std::uint64_t bytes) noexcept override;
  BackingMemory do_memory() const override;
  HostPages do_host_pages() const override;
  bool do_touchable() const noexcept override { return true; }
  std::string do_describe() const override;

  std::uint64_t resident_bytes_locked() const;

  const std::uint64_t capacity_;
  const std::uint64_t page_size_;
};

}  // namespace plimsoll::backings
