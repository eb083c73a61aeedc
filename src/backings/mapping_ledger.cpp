#include "backings/mapping_ledger.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <utility>

#include <fmt/format.h>

#include "backings/granules.hpp"
#include "util/room_ahead.hpp"

namespace plimsoll::backings {

std::string MappingLedger::reserve_problem(std::uint64_t bytes) const {
  if (bytes == 0 || !util::is_aligned(bytes, granularity_))
    return fmt::format("reserve of {} bytes: the size must be a non-zero multiple of the granularity ({} bytes); "
                       "round it up with util::align_up()", bytes, granularity_);
  return {};
}

std::string MappingLedger::unreserve_problem(std::uintptr_t base, std::uint64_t bytes) const {
  const Reservation* found = find(base);
  if (found == nullptr || found->base != base)
    return fmt::format("unreserve of {:#x}: no reservation starts there; pass the address reserve() returned",
                       base);
  if (found->bytes != bytes)
    return fmt::format("unreserve of {:#x} with {} bytes: it was reserved with {} bytes; pass the reserved size",
                       base, bytes, found->bytes);
  return {};
}

std::string MappingLedger::alignment_problem(std::string_view what, std::uintptr_t addr,
                                             std::uint64_t bytes) const {
  if (bytes == 0) return fmt::format("{} of 0 bytes at {:#x}: ask for at least one granule", what, addr);
  if (!util::is_aligned(addr, granularity_) || !util::is_aligned(bytes, granularity_))
    return fmt::format("{} of {} bytes at {:#x}: address and size must be multiples of the granularity ({} bytes)",
                       what, bytes, addr, granularity_);
  if (addr + bytes < addr)
    return fmt::format("{} of {} bytes at {:#x}: the range wraps around the address space", what, bytes, addr);
  return {};
}

std::string MappingLedger::map_problem(std::uintptr_t addr, std::uint64_t bytes) const {
  if (auto problem = alignment_problem("map", addr, bytes); !problem.empty()) return problem;
  if (!inside_one_reservation(addr, bytes))
    return fmt::format("map of {} bytes at {:#x}: the range is not inside one reservation; reserve() it first",
                       bytes, addr);
  if (count_mapped(*find(addr), addr, addr + bytes) != 0)
    return fmt::format("map of {} bytes at {:#x}: part of the range is already mapped; unmap() it first",
                       bytes, addr);
  return {};
}

std::string MappingLedger::unmap_problem(std::uintptr_t addr, std::uint64_t bytes) const {
  if (auto problem = alignment_problem("unmap", addr, bytes); !problem.empty()) return problem;
  if (!inside_one_reservation(addr, bytes))
    return fmt::format("unmap of {} bytes at {:#x}: the range is not inside one reservation", bytes, addr);
  if (count_mapped(*find(addr), addr, addr + bytes) != bytes / granularity_)
    return fmt::format("unmap of {} bytes at {:#x}: part of the range is not mapped; unmap only what map() backed",
                       bytes, addr);
  return {};
}

void MappingLedger::make_room_for_reservation(std::uint64_t bytes) {
  const std::uint64_t words = words_for(bytes / granularity_);
  util::make_room_for(reservations_);  // geometric: one more per reservation would copy the list every time
  if (room_words_ < words) {
    room_ = std::make_unique<std::uint64_t[]>(words);  // zeroed: nothing mapped yet
    room_words_ = words;
  }
}

void MappingLedger::record_reserve(std::uintptr_t base, std::uint64_t bytes) {
  make_room_for_reservation(bytes);  // nothing to do after the backing's own call made it ready
  std::fill_n(room_.get(), words_for(bytes / granularity_), 0);
  const auto after = std::upper_bound(reservations_.begin(), reservations_.end(), base,
                                      [](std::uintptr_t b, const Reservation& r) { return b < r.base; });
  reservations_.insert(after, Reservation{.base = base, .bytes = bytes, .mapped = std::move(room_)});
  room_words_ = 0;
}

std::uint64_t MappingLedger::record_unreserve(std::uintptr_t base, std::uint64_t bytes) noexcept {
  const Reservation* found = find(base);
  if (found == nullptr || found->base != base) return 0;
  const std::uint64_t still_mapped = count_mapped(*found, base, base + bytes) * granularity_;
  mapped_bytes_ -= still_mapped;
  reservations_.erase(reservations_.begin() + (found - reservations_.data()));
  return still_mapped;
}

void MappingLedger::record_map(std::uintptr_t addr, std::uint64_t bytes) noexcept {
  mapped_bytes_ += mark(addr, bytes, true) * granularity_;
}

void MappingLedger::record_unmap(std::uintptr_t addr, std::uint64_t bytes) noexcept {
  mapped_bytes_ -= mark(addr, bytes, false) * granularity_;
}

const MappingLedger::Reservation* MappingLedger::find(std::uintptr_t addr) const noexcept {
  const auto after = std::upper_bound(reservations_.begin(), reservations_.end(), addr,
                                      [](std::uintptr_t a, const Reservation& r) { return a < r.base; });
  if (after == reservations_.begin()) return nullptr;
  const Reservation& candidate = *std::prev(after);
  return addr - candidate.base < candidate.bytes ? &candidate : nullptr;
}

MappingLedger::Reservation* MappingLedger::find(std::uintptr_t addr) noexcept {
  return const_cast<Reservation*>(std::as_const(*this).find(addr));
}

std::uint64_t MappingLedger::mark(std::uintptr_t addr, std::uint64_t bytes, bool mapped) noexcept {
  Reservation* reservation = find(addr);
  if (reservation == nullptr) return 0;
  const std::uint64_t first = (addr - reservation->base) / granularity_;
  const std::uint64_t last = std::min(first + bytes / granularity_, reservation->bytes / granularity_);
  if (first >= last) return 0;
  const std::uint64_t set_before = util::count_set_bits(reservation->mapped.get(), first, last);
  util::assign_bits(reservation->mapped.get(), first, last, mapped);
  return mapped ? (last - first) - set_before : set_before;
}

std::uint64_t MappingLedger::count_mapped(const Reservation& reservation, std::uintptr_t begin,
                                          std::uintptr_t end) const noexcept {
  const std::uintptr_t reservation_end = reservation.base + reservation.bytes;
  begin = std::max(begin, reservation.base);
  end = std::min(end, reservation_end);
  if (begin >= end) return 0;
  // Granules partly inside [begin, end) count (the callers pass granule-aligned ranges).
  return util::count_set_bits(reservation.mapped.get(), (begin - reservation.base) / granularity_,
                              (end - reservation.base + granularity_ - 1) / granularity_);
}

std::uint64_t MappingLedger::mapped_bytes_in(std::uintptr_t begin, std::uintptr_t end) const noexcept {
  std::uint64_t inside = 0;
  for (const Reservation& reservation : reservations_) {
    if (reservation.base >= end) break;
    inside += count_mapped(reservation, begin, end);
  }
  return inside * granularity_;
}

bool MappingLedger::inside_one_reservation(std::uintptr_t addr, std::uint64_t bytes) const {
  const Reservation* reservation = find(addr);
  return reservation != nullptr && bytes <= reservation->bytes - (addr - reservation->base);
}

void abort_on_contract_violation(std::string_view backing, const std::string& problem) noexcept {
  std::fprintf(stderr, "plimsoll: %.*s backing misused (a bug in plimsoll's engine): %s\n",
               static_cast<int>(backing.size()), backing.data(), problem.c_str());
  std::abort();
}

}  // namespace plimsoll::backings
