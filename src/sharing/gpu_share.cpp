// A plimsoll-engine process in a GPU's ledger: it can give cached memory back, so it may borrow others' unused
// shares, and answers their requests by trimming.
#include "sharing/gpu_share.hpp"

#include <fmt/format.h>

#include "plimsoll/error.hpp"
#include "sharing/process_identity.hpp"

namespace plimsoll {

GpuShare::GpuShare(const std::string& gpu_uuid, std::uint64_t device_bytes, const ShareSpec& spec,
                   const std::string& ledger_dir) {
  auto file = sharing::LedgerFile::open_or_create(ledger_dir, gpu_uuid, device_bytes);
  const auto [share, cap] = spec.resolve(file.layout().header.limit_bytes);
  impl_ = std::unique_ptr<Impl>(new Impl{.ledger = sharing::Ledger(std::move(file)), .slot = -1, .share = share,
                                         .cap = cap});
  const sharing::ProcessIdentity me = sharing::this_process();
  impl_->slot = impl_->ledger.join(sharing::Member{.who = me, .share = share, .cap = cap, .can_trim = true,
                                                   .interposed = false, .command = sharing::command_of(me.pid)});
}

GpuShare::~GpuShare() { impl_->ledger.leave(impl_->slot); }

bool GpuShare::trim_requested() const noexcept { return impl_->ledger.trim_requested(impl_->slot); }

void GpuShare::honour_trim_request(const std::function<void()>& trim) {
  if (!trim_requested()) return;
  trim();
  impl_->ledger.trim_done(impl_->slot);
}

std::uint64_t GpuShare::share_bytes() const noexcept { return impl_->share; }
std::uint64_t GpuShare::cap_bytes() const noexcept { return impl_->cap; }
std::uint64_t GpuShare::charged_bytes() const { return impl_->ledger.charged(impl_->slot); }

}  // namespace plimsoll
