#pragma once
// Whether a process may take more of the GPU: the rule every charge goes through, as a pure function of the
// ledger's totals and the process's own entry (docs/sharing.md, "Admission").
//
// - Nobody passes its cap, and all processes together never pass the limit.
// - Within its share a process is admitted whenever the GPU has room.
// - Beyond its share it borrows. A process that can give memory back (a plimsoll engine) may borrow any free
//   memory, other processes' unused shares included: when one of them needs its share, it is asked to trim.
//   A process that cannot (an interposed framework) borrows only memory no share is waiting for, so that
//   every share stays guaranteed.
#include <cstdint>

namespace plimsoll::sharing {

struct LedgerTotals {
  std::uint64_t limit = 0;
  std::uint64_t charged = 0;             // sum of charged
  std::uint64_t committed = 0;           // sum of max(charged, share)
  std::uint64_t trimmable_borrowed = 0;  // sum over can-trim processes of max(0, charged - share)
};

struct Holder {
  std::uint64_t share = 0;
  std::uint64_t cap = 0;
  std::uint64_t charged = 0;
  bool can_trim = false;
};

enum class Verdict {
  admitted,
  over_cap,         // the process would pass its own cap
  device_full,      // the GPU has no room, and nobody who could give memory back borrowed any
  shares_reserved,  // the GPU has room, but it belongs to other processes' unused shares
  needs_trim,       // within its share, but can-trim processes borrowed the room: they are asked to give it back
};

/// The most bytes `self` may be charged now (its entry is part of `totals`).
std::uint64_t headroom(const LedgerTotals& totals, const Holder& self) noexcept;
/// The verdict on charging `bytes` more to `self`.
Verdict decide(const LedgerTotals& totals, const Holder& self, std::uint64_t bytes) noexcept;
/// "over its cap", "the GPU is full", ...
const char* describe(Verdict verdict) noexcept;

/// What one process contributes to the totals.
inline std::uint64_t committed_by(const Holder& h) noexcept { return h.charged > h.share ? h.charged : h.share; }
inline std::uint64_t borrowed_by(const Holder& h) noexcept { return h.charged > h.share ? h.charged - h.share : 0; }

}  // namespace plimsoll::sharing
