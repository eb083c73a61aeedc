#pragma once
// The book a backing keeps of what the engine reserved and mapped, so that a wrong call (a double map, an
// unmap of memory never mapped, a range outside every reservation) is caught at the call instead of
// corrupting memory or accounting later. Not thread-safe: the owning backing holds a lock around it.
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

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

  // Records, for calls that passed their check.
  void record_reserve(std::uintptr_t base, std::uint64_t bytes);
  /// Returns the bytes that were still mapped inside the reservation (now forgotten too).
  std::uint64_t record_unreserve(std::uintptr_t base, std::uint64_t bytes);
  void record_map(std::uintptr_t addr, std::uint64_t bytes);
  void record_unmap(std::uintptr_t addr, std::uint64_t bytes);

  std::uint64_t mapped_bytes() const noexcept { return mapped_bytes_; }
  /// The bytes mapped inside [begin, end).
  std::uint64_t mapped_bytes_in(std::uintptr_t begin, std::uintptr_t end) const;

  /// Calls `visit(begin, end)` for each maximal mapped range, in address order.
  template <class Visit>
  void for_each_mapped(Visit&& visit) const {
    for (const auto& [begin, end] : mapped_) visit(begin, end);
  }
  /// Calls `visit(base, bytes)` for each reservation, in address order.
  template <class Visit>
  void for_each_reservation(Visit&& visit) const {
    for (const auto& [base, bytes] : reservations_) visit(base, bytes);
  }

 private:
  /// Forgets whatever is mapped in [begin, end); returns how many bytes that was.
  std::uint64_t erase_mapped(std::uintptr_t begin, std::uintptr_t end);
  bool inside_one_reservation(std::uintptr_t addr, std::uint64_t bytes) const;
  bool overlaps_mapped(std::uintptr_t begin, std::uintptr_t end) const;
  bool fully_mapped(std::uintptr_t begin, std::uintptr_t end) const;
  std::string alignment_problem(std::string_view what, std::uintptr_t addr, std::uint64_t bytes) const;

  std::uint64_t granularity_;
  std::map<std::uintptr_t, std::uint64_t> reservations_;  // base -> bytes
  std::map<std::uintptr_t, std::uintptr_t> mapped_;       // begin -> end, disjoint, adjacent ranges merged
  std::uint64_t mapped_bytes_ = 0;
};

/// For a wrong call where no exception can be thrown (unmap and unreserve are noexcept): says what went
/// wrong on stderr and aborts, since going on would unmap or account memory that is not ours.
[[noreturn]] void abort_on_contract_violation(std::string_view backing, const std::string& problem) noexcept;

}  // namespace plimsoll::backings
