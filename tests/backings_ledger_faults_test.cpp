// A backing's books when host memory runs out (docs/engine.md, "Out of host memory"): the backing acts first (maps,
// unmaps, reserves) and records after, and unmap is noexcept, so a book that allocated there left memory mapped or
// reserved that nothing recorded, or terminated. Now a reservation's record is made before the backing reserves
// (std::bad_alloc with nothing reserved), and recording a map or an unmap allocates nothing. Failures are injected by
// replacing operator new in this test program (failing_operator_new.hpp); the tests skip under a sanitizer.
#include <gtest/gtest.h>

#include <cstdint>
#include <new>
#include <string>

#include "backings/backing.hpp"

#include "failing_operator_new.hpp"

namespace plimsoll::backings {
namespace {

constexpr std::uint64_t G = std::uint64_t{2} << 20;

// Counts what the backing was asked to do, so a test sees an action the books did not record.
class CountingBacking final : public Backing {
 public:
  CountingBacking() : Backing("counting", G) {}
  int reserves = 0, unreserves = 0;
  std::uint64_t acted_mapped = 0;  // bytes the hooks mapped minus those they unmapped

 private:
  std::uintptr_t do_reserve(std::uint64_t bytes) override {
    ++reserves;
    const std::uintptr_t base = next_;
    next_ += bytes + G;  // a gap: reservations never back to back here
    return base;
  }
  void do_unreserve(std::uintptr_t, std::uint64_t) noexcept override { ++unreserves; }
  bool do_map(std::uintptr_t, std::uint64_t bytes) override {
    acted_mapped += bytes;
    return true;
  }
  void do_unmap(std::uintptr_t, std::uint64_t bytes) noexcept override { acted_mapped -= bytes; }
  BackingMemory do_memory() const override { return {.total_bytes = 1ull << 40, .free_bytes = 1ull << 40}; }
  bool do_touchable() const noexcept override { return false; }
  std::string do_describe() const override { return "counting backing"; }

  std::uintptr_t next_ = std::uintptr_t{1} << 40;
};

TEST(BackingsLedgerFaults, AReservationOutOfHostMemoryReservesNothing) {
  SKIP_UNLESS_NEW_CAN_FAIL();
  CountingBacking backing;
  bool bad_alloc = false;
  {
    const ScopedFailures failing;
    try {
      (void)backing.reserve(64 * G);
    } catch (const std::bad_alloc&) {
      bad_alloc = true;
    }
  }
  EXPECT_TRUE(bad_alloc);
  EXPECT_EQ(backing.reserves, 0) << "reserved, then the record failed: a reservation nothing will ever release";
  const std::uintptr_t base = backing.reserve(64 * G);  // with memory again, as usual
  ASSERT_NE(base, 0U);
  backing.unreserve(base, 64 * G);
  EXPECT_EQ(backing.unreserves, 1);
}

TEST(BackingsLedgerFaults, AMapOutOfHostMemoryIsRecorded) {
  SKIP_UNLESS_NEW_CAN_FAIL();
  CountingBacking backing;
  const std::uintptr_t base = backing.reserve(64 * G);
  bool mapped = false;
  {
    const ScopedFailures failing;
    // Before, the book's node was made after the hook mapped: std::bad_alloc with the range mapped, unrecorded.
    ASSERT_NO_THROW(mapped = backing.map(base + 4 * G, 8 * G));
    ASSERT_NO_THROW(mapped = backing.map(base + 12 * G, 4 * G) && mapped);  // merges with its neighbour
  }
  EXPECT_TRUE(mapped);
  EXPECT_EQ(backing.mapped_bytes(), 12 * G);
  EXPECT_EQ(backing.acted_mapped, 12 * G);
  EXPECT_THROW((void)backing.map(base + 8 * G, G), std::logic_error) << "the book knows the range is mapped";
  backing.unmap(base + 4 * G, 12 * G);
  backing.unreserve(base, 64 * G);
}

TEST(BackingsLedgerFaults, AnUnmapOutOfHostMemoryIsRecorded) {
  SKIP_UNLESS_NEW_CAN_FAIL();
  CountingBacking backing;
  const std::uintptr_t base = backing.reserve(64 * G);
  ASSERT_TRUE(backing.map(base, 16 * G));
  {
    const ScopedFailures failing;
    // The middle of a mapped range splits it in two: before, a new node inside the noexcept unmap (terminate).
    backing.unmap(base + 6 * G, 2 * G);
    backing.unmap(base, G);  // an end
  }
  EXPECT_EQ(backing.mapped_bytes(), 13 * G);
  EXPECT_EQ(backing.acted_mapped, 13 * G);
  EXPECT_TRUE(backing.map(base + 6 * G, 2 * G)) << "the unmapped middle maps again";
  backing.unmap(base + G, 15 * G);
  EXPECT_EQ(backing.mapped_bytes(), 0U);
  backing.unreserve(base, 64 * G);
}

}  // namespace
}  // namespace plimsoll::backings
