// MappingLedger: the bookkeeping behind the backings' checks, including ranges merged across adjacent
// reservations (real mmap can place two reservations back to back).
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "backings/mapping_ledger.hpp"

namespace plimsoll::backings {
namespace {

constexpr std::uint64_t G = 0x1000;  // granule
constexpr std::uintptr_t A = 0x100000;

std::vector<std::pair<std::uintptr_t, std::uintptr_t>> ranges(const MappingLedger& ledger) {
  std::vector<std::pair<std::uintptr_t, std::uintptr_t>> out;
  ledger.for_each_mapped([&](std::uintptr_t begin, std::uintptr_t end) { out.emplace_back(begin, end); });
  return out;
}

using Ranges = std::vector<std::pair<std::uintptr_t, std::uintptr_t>>;

TEST(MappingLedger, MergesNeighboursAndSplitsOnUnmap) {
  MappingLedger ledger(G);
  ledger.record_reserve(A, 8 * G);
  ledger.record_map(A + 2 * G, G);
  ledger.record_map(A, G);
  EXPECT_EQ(ranges(ledger), (Ranges{{A, A + G}, {A + 2 * G, A + 3 * G}}));
  ledger.record_map(A + G, G);
  EXPECT_EQ(ranges(ledger), (Ranges{{A, A + 3 * G}}));
  EXPECT_EQ(ledger.mapped_bytes(), 3 * G);

  EXPECT_EQ(ledger.unmap_problem(A, 3 * G), "");
  ledger.record_unmap(A + G, G);
  EXPECT_EQ(ranges(ledger), (Ranges{{A, A + G}, {A + 2 * G, A + 3 * G}}));
  EXPECT_EQ(ledger.mapped_bytes(), 2 * G);
  EXPECT_NE(ledger.unmap_problem(A, 3 * G), "");
  EXPECT_EQ(ledger.map_problem(A + G, G), "");
  EXPECT_NE(ledger.map_problem(A + G, 2 * G), "");
}

TEST(MappingLedger, UnreserveForgetsOnlyItsOwnPartOfAMergedRange) {
  MappingLedger ledger(G);
  ledger.record_reserve(A, 4 * G);
  ledger.record_reserve(A + 4 * G, 4 * G);  // back to back
  ledger.record_map(A + 2 * G, 2 * G);
  ledger.record_map(A + 4 * G, 2 * G);
  EXPECT_EQ(ranges(ledger), (Ranges{{A + 2 * G, A + 6 * G}}));
  EXPECT_NE(ledger.map_problem(A + 2 * G, 4 * G), "") << "crosses two reservations (and is mapped)";
  EXPECT_NE(ledger.unmap_problem(A + 2 * G, 4 * G), "") << "crosses two reservations";

  EXPECT_EQ(ledger.unreserve_problem(A + 4 * G, 4 * G), "");
  EXPECT_EQ(ledger.record_unreserve(A + 4 * G, 4 * G), 2 * G);
  EXPECT_EQ(ranges(ledger), (Ranges{{A + 2 * G, A + 4 * G}}));
  EXPECT_EQ(ledger.mapped_bytes(), 2 * G);
  EXPECT_NE(ledger.unreserve_problem(A + 4 * G, 4 * G), "") << "already released";
}

TEST(MappingLedger, ChecksAlignmentAndWraparound) {
  MappingLedger ledger(G);
  EXPECT_NE(ledger.reserve_problem(0), "");
  EXPECT_NE(ledger.reserve_problem(G + 1), "");
  EXPECT_EQ(ledger.reserve_problem(3 * G), "");
  ledger.record_reserve(A, 4 * G);
  EXPECT_NE(ledger.map_problem(A + 1, G), "");
  EXPECT_NE(ledger.map_problem(A, G - 1), "");
  EXPECT_NE(ledger.map_problem(A, ~std::uint64_t{0} - G + 1), "") << "wraps around";
  EXPECT_NE(ledger.map_problem(A + 4 * G, G), "");
  EXPECT_EQ(ledger.map_problem(A + 3 * G, G), "");
}

}  // namespace
}  // namespace plimsoll::backings
