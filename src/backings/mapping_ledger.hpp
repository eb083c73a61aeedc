#pragma once
// The book a backing keeps of what the engine reserved and mapped, so that a wrong call (a double map, an
// unmap of memory never mapped, a range outside every reservation) is caught at the call instead of
// corrupting memory or accounting later. Not thread-safe: the owning backing holds a lock around it.
//
// Recording a map or an unmap allocates nothing: each reservation carries one bit per granule, made with the
// reservation. A backing acts (maps, unmaps) before the call is recorded, and unmap is noexcept, so a book that
// grew there would leave memory mapped and unrecorded, or terminate, when the host runs out of memory
// (docs/engine.md, "Out of host memory"). What can allocate, a reservation's record, is made ready before the
// backing reserves (make_room_for_reservation).
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "util/bit_runs.hpp"

namespace plimsoll::backings {

class MappingLedger {
 public:
  /// `granularity` must be a power of two.
  explicit MappingLedger(std::uint64_t granularity) noexcept : granularity_(granularity) {}

  // Checks: an empty string when the call is right, else what is wrong with it.
  std::string reserve_problem(std::uint64_t bytes) const;
  std::string unreserve_problem(std::uintptr_t base, std::uint64_t bytes) const;
  std::string map_problem(std::uintptr_t addr, std::uint64_t bytes) const;
  std::string unmap_problem(std::uintptr_t addr, std::uint64_t bytes) const;

  /// Makes everything the next record_reserve of `bytes` needs (its granule bits, room in the list). Throws
  /// std::bad_alloc with nothing changed; call it before the backing reserves, so nothing is reserved unrecorded.
  void make_room_for_reservation(std::uint64_t bytes);

  // Records, for calls that passed their check. record_reserve allocates nothing after make_room_for_reservation
  // for the same size (without it, it makes the room itself and may throw std::bad_alloc, recording nothing).
  void record_reserve(std::uintptr_t base, std::uint64_t bytes);
  /// Returns the bytes that were still mapped inside the reservation (now forgotten too).
  std::uint64_t record_unreserve(std::uintptr_t base, std::uint64_t bytes) noexcept;
  void record_map(std::uintptr_t addr, std::uint64_t bytes) noexcept;
  void record_unmap(std::uintptr_t addr, std::uint64_t bytes) noexcept;

  std::uint64_t mapped_bytes() const noexcept { return mapped_bytes_; }
  /// The bytes mapped inside [begin, end).
  std::uint64_t mapped_bytes_in(std::uintptr_t begin, std::uintptr_t end) const noexcept;

  /// Calls `visit(begin, end)` for each maximal mapped range, in address order (ranges of back-to-back
  /// reservations merged, as the kernel sees them).
  template <class Visit>
  void for_each_mapped(Visit&& visit) const {
    std::uintptr_t begin = 0, end = 0;  // the range waiting for its end; empty while begin == end
    for (const Reservation& reservation : reservations_) {
      for_each_run(reservation, [&](std::uintptr_t run_begin, std::uintptr_t run_end) {
        if (begin != end && run_begin == end) {
          end = run_end;
          return;
        }
        if (begin != end) visit(begin, end);
        begin = run_begin;
        end = run_end;
      });
    }
    if (begin != end) visit(begin, end);
  }
  /// Calls `visit(base, bytes)` for each reservation, in address order.
  template <class Visit>
  void for_each_reservation(Visit&& visit) const {
    for (const Reservation& reservation : reservations_) visit(reservation.base, reservation.bytes);
  }

 private:
  // Invariant: reservations_ sorted by base and disjoint; `mapped` has one bit per granule of the reservation, set
  // exactly for the mapped ones; mapped_bytes_ is their sum over every reservation.
  struct Reservation {
    std::uintptr_t base = 0;
    std::uint64_t bytes = 0;
    std::unique_ptr<std::uint64_t[]> mapped;
  };

  // A word at a time (util/bit_runs.hpp): stats() walks every reservation under the backing's lock.
  template <class Run>
  void for_each_run(const Reservation& reservation, Run&& run) const {
    util::for_each_bit_run(reservation.mapped.get(), 0, reservation.bytes / granularity_, true,
                           [&](std::uint64_t first, std::uint64_t count) {
                             run(reservation.base + first * granularity_,
                                 reservation.base + (first + count) * granularity_);
                           });
  }
  static std::uint64_t words_for(std::uint64_t granules) noexcept { return (granules + 63) / 64; }

  /// The reservation holding addr, or nullptr.
  const Reservation* find(std::uintptr_t addr) const noexcept;
  Reservation* find(std::uintptr_t addr) noexcept;
  /// Sets or clears the granules of [addr, addr + bytes), inside one reservation; returns how many changed.
  std::uint64_t mark(std::uintptr_t addr, std::uint64_t bytes, bool mapped) noexcept;
  /// How many granules of [begin, end) (inside `reservation`) are mapped.
  std::uint64_t count_mapped(const Reservation& reservation, std::uintptr_t begin, std::uintptr_t end) const noexcept;
  bool inside_one_reservation(std::uintptr_t addr, std::uint64_t bytes) const;
  std::string alignment_problem(std::string_view what, std::uintptr_t addr, std::uint64_t bytes) const;

  std::uint64_t granularity_;
  std::vector<Reservation> reservations_;
  std::unique_ptr<std::uint64_t[]> room_;  // granule bits made ready for the next reservation
  std::uint64_t room_words_ = 0;
  std::uint64_t mapped_bytes_ = 0;
};

/// For a wrong call where no exception can be thrown (unmap and unreserve are noexcept): says what went
/// wrong on stderr and aborts, since going on would unmap or account memory that is not ours.
[[noreturn]] void abort_on_contract_violation(std::string_view backing, const std::string& problem) noexcept;

}  // namespace plimsoll::backings
