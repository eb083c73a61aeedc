#pragma once
// A backing over an upstream one (RMM's adaptors): every hook goes to the upstream unless the adaptor overrides
// it. The adaptor keeps its own books too (Backing's ledger), so a wrong call is refused before the adaptor acts,
// e.g. before the shared-GPU backing charges a map the upstream would refuse as misuse.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "backings/backing.hpp"

namespace plimsoll::backings {

class BackingAdaptor : public Backing {
 protected:
  /// `upstream` must outlive this adaptor.
  BackingAdaptor(std::string_view kind, Backing& upstream) : Backing(kind, upstream.granularity()), upstream_(upstream) {}

  Backing& upstream() const noexcept { return upstream_; }

 private:
  std::uintptr_t do_reserve(std::uint64_t bytes) override { return upstream_.reserve(bytes); }
  void do_unreserve(std::uintptr_t base, std::uint64_t bytes) noexcept override { upstream_.unreserve(base, bytes); }
  bool do_map(std::uintptr_t addr, std::uint64_t bytes) override { return upstream_.map(addr, bytes); }
  void do_unmap(std::uintptr_t addr, std::uint64_t bytes) noexcept override { upstream_.unmap(addr, bytes); }
  BackingMemory do_memory() const override { return upstream_.memory(); }
  HostPages do_host_pages() const override { return upstream_.host_pages(); }
  bool do_touchable() const noexcept override { return upstream_.touchable(); }
  std::string do_describe() const override { return upstream_.describe(); }
  StreamEvents* do_stream_events() noexcept override { return upstream_.stream_events(); }
  DeviceCopy* do_device_copy() noexcept override { return upstream_.device_copy(); }
  bool do_can_wait_for_memory() const noexcept override { return upstream_.can_wait_for_memory(); }
  void do_wait_for_memory() noexcept override { upstream_.wait_for_memory(); }
  void do_lock_upstream_for_fork() noexcept override { upstream_.lock_for_fork(); }
  void do_unlock_upstream_after_fork() noexcept override { upstream_.unlock_after_fork(); }

  Backing& upstream_;
};

/// An adaptor that owns its upstream.
class OwningBackingAdaptor : public BackingAdaptor {
 protected:
  OwningBackingAdaptor(std::string_view kind, std::unique_ptr<Backing> upstream)
      : BackingAdaptor(kind, *upstream), owned_(std::move(upstream)) {}

 private:
  std::unique_ptr<Backing> owned_;
};

}  // namespace plimsoll::backings
