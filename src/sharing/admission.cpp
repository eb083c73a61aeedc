#include "sharing/admission.hpp"

#include <algorithm>

namespace plimsoll::sharing {

namespace {

std::uint64_t room_below(std::uint64_t ceiling, std::uint64_t used) noexcept {
  return used < ceiling ? ceiling - used : 0;
}

}  // namespace

std::uint64_t headroom(const LedgerTotals& totals, const Holder& self) noexcept {
  std::uint64_t room = std::min(room_below(self.cap, self.charged), room_below(totals.limit, totals.charged));
  if (!self.can_trim) {
    // Beyond its share it may grow only into what the others' shares and borrowing leave uncommitted.
    const std::uint64_t others_committed = totals.committed - committed_by(self);
    const std::uint64_t ceiling = std::max(self.share, room_below(totals.limit, others_committed));
    room = std::min(room, room_below(ceiling, self.charged));
  }
  return room;
}

Verdict decide(const LedgerTotals& totals, const Holder& self, std::uint64_t bytes) noexcept {
  if (bytes <= headroom(totals, self)) return Verdict::admitted;
  if (bytes > room_below(self.cap, self.charged)) return Verdict::over_cap;
  if (bytes > room_below(totals.limit, totals.charged)) {
    const bool within_share = bytes <= room_below(self.share, self.charged);
    return within_share && totals.trimmable_borrowed > 0 ? Verdict::needs_trim : Verdict::device_full;
  }
  return Verdict::shares_reserved;
}

const char* describe(Verdict verdict) noexcept {
  switch (verdict) {
    case Verdict::admitted: return "admitted";
    case Verdict::over_cap: return "it would pass its cap";
    case Verdict::device_full: return "the GPU's limit is reached";
    case Verdict::shares_reserved: return "the free memory left is other processes' guaranteed shares";
    case Verdict::needs_trim: return "processes that borrowed beyond their shares hold it (asked to give it back)";
  }
  return "?";
}

}  // namespace plimsoll::sharing
