#include "backings/mapping_ledger.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iterator>

#include <fmt/format.h>

#include "backings/granules.hpp"

namespace plimsoll::backings {

std::string MappingLedger::reserve_problem(std::uint64_t bytes) const {
  if (bytes == 0 || !util::is_aligned(bytes, granularity_))
    return fmt::format("reserve of {} bytes: the size must be a non-zero multiple of the granularity ({} bytes); "
                       "round it up with util::align_up()", bytes, granularity_);
  return {};
}

std::string MappingLedger::unreserve_problem(std::uintptr_t base, std::uint64_t bytes) const {
  const auto found = reservations_.find(base);
  if (found == reservations_.end())
    return fmt::format("unreserve of {:#x}: no reservation starts there; pass the address reserve() returned",
                       base);
  if (found->second != bytes)
    return fmt::format("unreserve of {:#x} with {} bytes: it was reserved with {} bytes; pass the reserved size",
                       base, bytes, found->second);
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
  if (overlaps_mapped(addr, addr + bytes))
    return fmt::format("map of {} bytes at {:#x}: part of the range is already mapped; unmap() it first",
                       bytes, addr);
  return {};
}

std::string MappingLedger::unmap_problem(std::uintptr_t addr, std::uint64_t bytes) const {
  if (auto problem = alignment_problem("unmap", addr, bytes); !problem.empty()) return problem;
  if (!inside_one_reservation(addr, bytes))
    return fmt::format("unmap of {} bytes at {:#x}: the range is not inside one reservation", bytes, addr);
  if (!fully_mapped(addr, addr + bytes))
    return fmt::format("unmap of {} bytes at {:#x}: part of the range is not mapped; unmap only what map() backed",
                       bytes, addr);
  return {};
}

void MappingLedger::record_reserve(std::uintptr_t base, std::uint64_t bytes) { reservations_.emplace(base, bytes); }

std::uint64_t MappingLedger::record_unreserve(std::uintptr_t base, std::uint64_t bytes) {
  reservations_.erase(base);
  return erase_mapped(base, base + bytes);
}

void MappingLedger::record_map(std::uintptr_t addr, std::uint64_t bytes) {
  std::uintptr_t begin = addr;
  std::uintptr_t end = addr + bytes;
  auto next = mapped_.lower_bound(begin);
  if (next != mapped_.begin()) {
    const auto previous = std::prev(next);
    if (previous->second == begin) {
      begin = previous->first;
      mapped_.erase(previous);
    }
  }
  if (next != mapped_.end() && next->first == end) {
    end = next->second;
    mapped_.erase(next);
  }
  mapped_.emplace(begin, end);
  mapped_bytes_ += bytes;
}

void MappingLedger::record_unmap(std::uintptr_t addr, std::uint64_t bytes) { erase_mapped(addr, addr + bytes); }

std::uint64_t MappingLedger::erase_mapped(std::uintptr_t begin, std::uintptr_t end) {
  std::uint64_t erased = 0;
  auto range = mapped_.upper_bound(begin);
  if (range != mapped_.begin() && std::prev(range)->second > begin) --range;
  // Ranges may run across adjacent reservations (they are merged), so keep the parts outside [begin, end).
  while (range != mapped_.end() && range->first < end) {
    const auto [range_begin, range_end] = *range;
    range = mapped_.erase(range);
    if (range_begin < begin) mapped_.emplace(range_begin, begin);
    if (end < range_end) mapped_.emplace(end, range_end);
    erased += std::min(range_end, end) - std::max(range_begin, begin);
  }
  mapped_bytes_ -= erased;
  return erased;
}

std::uint64_t MappingLedger::mapped_bytes_in(std::uintptr_t begin, std::uintptr_t end) const {
  std::uint64_t inside = 0;
  auto range = mapped_.upper_bound(begin);
  if (range != mapped_.begin() && std::prev(range)->second > begin) --range;
  for (; range != mapped_.end() && range->first < end; ++range)
    inside += std::min(range->second, end) - std::max(range->first, begin);
  return inside;
}

bool MappingLedger::inside_one_reservation(std::uintptr_t addr, std::uint64_t bytes) const {
  auto after = reservations_.upper_bound(addr);
  if (after == reservations_.begin()) return false;
  const auto& [base, reserved] = *std::prev(after);
  const std::uint64_t offset = addr - base;
  return offset < reserved && bytes <= reserved - offset;
}

bool MappingLedger::overlaps_mapped(std::uintptr_t begin, std::uintptr_t end) const {
  auto next = mapped_.lower_bound(begin);
  if (next != mapped_.end() && next->first < end) return true;
  return next != mapped_.begin() && std::prev(next)->second > begin;
}

bool MappingLedger::fully_mapped(std::uintptr_t begin, std::uintptr_t end) const {
  // Adjacent ranges are merged, so a fully mapped span lies inside a single range.
  auto after = mapped_.upper_bound(begin);
  if (after == mapped_.begin()) return false;
  return std::prev(after)->second >= end;
}

void abort_on_contract_violation(std::string_view backing, const std::string& problem) noexcept {
  std::fprintf(stderr, "plimsoll: %.*s backing misused (a bug in plimsoll's engine): %s\n",
               static_cast<int>(backing.size()), backing.data(), problem.c_str());
  std::abort();
}

}  // namespace plimsoll::backings
