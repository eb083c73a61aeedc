// A plimsoll-engine process in a GPU's ledger: it can give cached memory back, so it may borrow others' unused
// shares, and answers their requests by trimming.
#include "sharing/gpu_share.hpp"

#include <exception>

#include <fmt/format.h>

#include "plimsoll/error.hpp"
#include "plimsoll/size.hpp"
#include "sharing/control_requests.hpp"
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

namespace {

// Carries out a pause or resume request; the answer's message says what was done, or why not.
std::string carry_out(sharing::ControlKind kind, const ShareHooks& hooks, sharing::LedgerEntry& entry) {
  constexpr auto relaxed = std::memory_order_relaxed;
  if (kind == sharing::ControlKind::resume) {
    if (!hooks.resume)
      throw InvalidState("this process cannot be resumed from outside: its TrimResponder was given no resume hook "
                         "(pass plimsoll::allocator_hooks(allocator))");
    hooks.resume();
    entry.flags.fetch_and(~sharing::kEntryPaused, relaxed);
    entry.paused_bytes.store(0, relaxed);
    return "resumed";
  }
  if (kind != sharing::ControlKind::pause && kind != sharing::ControlKind::pause_keeping_contents)
    throw InvalidArgument(fmt::format("unknown request {} in the ledger entry; use the same plimsoll version for "
                                      "the command and the job", static_cast<int>(kind)));
  if (!hooks.pause)
    throw InvalidState("this process cannot be paused from outside: its TrimResponder was given no pause hook "
                       "(pass plimsoll::allocator_hooks(allocator))");
  const bool keep = kind == sharing::ControlKind::pause_keeping_contents;
  const std::uint64_t bytes = hooks.pause(keep);
  entry.paused_bytes.store(bytes, relaxed);
  entry.flags.fetch_or(sharing::kEntryPaused, relaxed);
  return fmt::format("paused: {} given back{}", format_size(bytes), keep ? ", contents kept in host memory" : "");
}

// The process may pause or resume itself (Allocator::pause, not through the ledger): the entry follows it. Only a
// flag that disagrees is rewritten, so the bytes a ledger pause reported stay as reported.
void refresh_paused(sharing::LedgerEntry& entry, std::optional<std::uint64_t> paused_bytes) {
  constexpr auto relaxed = std::memory_order_relaxed;
  const bool flagged = (entry.flags.load(relaxed) & sharing::kEntryPaused) != 0;
  if (paused_bytes && !flagged) {
    entry.paused_bytes.store(*paused_bytes, relaxed);
    entry.flags.fetch_or(sharing::kEntryPaused, relaxed);
  } else if (!paused_bytes && flagged) {
    entry.flags.fetch_and(~sharing::kEntryPaused, relaxed);
    entry.paused_bytes.store(0, relaxed);
  }
}

}  // namespace

void GpuShare::honour_requests(const ShareHooks& hooks) {
  // Three independent duties: one that throws must not starve the others (a failing trim would otherwise leave
  // every pause request unanswered and the in-use bytes stale for good). The first error is passed on at the end.
  std::exception_ptr first_error;
  try {
    if (hooks.trim) honour_trim_request(hooks.trim);
  } catch (...) {
    first_error = std::current_exception();
  }
  sharing::LedgerEntry& entry = impl_->ledger.file().layout().entries[impl_->slot];
  if (const auto pending = sharing::pending_control(entry)) {
    try {
      const std::string done = carry_out(pending->kind, hooks, entry);
      sharing::answer_control(entry, pending->sequence, sharing::ControlStatus::done, done);
    } catch (const std::exception& error) {
      sharing::answer_control(entry, pending->sequence, sharing::ControlStatus::failed, error.what());
    } catch (...) {
      sharing::answer_control(entry, pending->sequence, sharing::ControlStatus::failed,
                              "the pause or resume hook threw something that is not a std::exception");
    }
  }
  try {
    if (hooks.in_use) impl_->ledger.set_in_use(impl_->slot, hooks.in_use());
  } catch (...) {
    if (!first_error) first_error = std::current_exception();
  }
  try {
    if (hooks.paused) refresh_paused(entry, hooks.paused());
  } catch (...) {
    if (!first_error) first_error = std::current_exception();
  }
  if (first_error) std::rethrow_exception(first_error);
}

std::uint64_t GpuShare::share_bytes() const noexcept { return impl_->share; }
std::uint64_t GpuShare::cap_bytes() const noexcept { return impl_->cap; }
std::uint64_t GpuShare::charged_bytes() const { return impl_->ledger.charged(impl_->slot); }

}  // namespace plimsoll
