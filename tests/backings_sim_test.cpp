// SimBacking: capacity accounting, other processes' share, synthetic addresses, and the checks that catch
// engine bugs (double map, unmapping what is not mapped, ranges outside reservations).
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "backings/sim_backing.hpp"
#include "plimsoll/error.hpp"

namespace plimsoll::backings {
namespace {

constexpr std::uint64_t MiB = std::uint64_t{1} << 20;
constexpr std::uint64_t GiB = std::uint64_t{1} << 30;

TEST(SimBacking, ReservesAlignedDisjointSyntheticRanges) {
  SimBacking backing(16 * GiB);
  EXPECT_EQ(backing.granularity(), 2 * MiB);
  EXPECT_FALSE(backing.touchable());
  const std::uintptr_t first = backing.reserve(64 * MiB);
  const std::uintptr_t second = backing.reserve(2 * MiB);
  const std::uintptr_t third = backing.reserve(1 * GiB);
  for (const std::uintptr_t base : {first, second, third}) {
    EXPECT_NE(base, 0U);
    EXPECT_EQ(base % (2 * MiB), 0U);
    EXPECT_GE(base, SimBacking::kFirstAddress) << "synthetic addresses stay above real user memory";
  }
  EXPECT_GT(second, first + 64 * MiB) << "a granule is left free between reservations";
  EXPECT_GT(third, second + 2 * MiB);
  backing.unreserve(first, 64 * MiB);
  backing.unreserve(second, 2 * MiB);
  backing.unreserve(third, 1 * GiB);
}

TEST(SimBacking, CustomGranularityAlignsAddresses) {
  SimBacking backing(GiB, 64 * MiB);
  const std::uintptr_t base = backing.reserve(128 * MiB);
  ASSERT_NE(base, 0U);
  EXPECT_EQ(base % (64 * MiB), 0U);
  EXPECT_THROW(backing.map(base + 2 * MiB, 64 * MiB), std::logic_error);
  backing.unreserve(base, 128 * MiB);
}

TEST(SimBacking, MapCountsAgainstCapacity) {
  SimBacking backing(16 * MiB);
  const std::uintptr_t base = backing.reserve(64 * MiB);
  ASSERT_NE(base, 0U);
  EXPECT_EQ(backing.memory().total_bytes, 16 * MiB);
  EXPECT_EQ(backing.memory().free_bytes, 16 * MiB);

  ASSERT_TRUE(backing.map(base, 8 * MiB));
  EXPECT_EQ(backing.memory().free_bytes, 8 * MiB);
  ASSERT_TRUE(backing.map(base + 8 * MiB, 8 * MiB));
  EXPECT_EQ(backing.memory().free_bytes, 0U);
  EXPECT_EQ(backing.mapped_bytes(), 16 * MiB);

  EXPECT_FALSE(backing.map(base + 16 * MiB, 2 * MiB)) << "the device is full";
  EXPECT_EQ(backing.mapped_bytes(), 16 * MiB);
  backing.unmap(base + 4 * MiB, 2 * MiB);
  EXPECT_EQ(backing.memory().free_bytes, 2 * MiB);
  EXPECT_TRUE(backing.map(base + 16 * MiB, 2 * MiB)) << "unmapping made room";
  EXPECT_FALSE(backing.map(base + 4 * MiB, 2 * MiB));

  backing.unmap(base, 4 * MiB);
  backing.unmap(base + 6 * MiB, 12 * MiB);  // spans granules mapped by separate calls
  EXPECT_EQ(backing.mapped_bytes(), 0U);
  EXPECT_EQ(backing.memory().free_bytes, 16 * MiB);
  backing.unreserve(base, 64 * MiB);
}

TEST(SimBacking, OthersOccupyingTheDeviceShrinkWhatCanBeMapped) {
  SimBacking backing(16 * MiB);
  const std::uintptr_t base = backing.reserve(16 * MiB);
  ASSERT_NE(base, 0U);
  backing.set_occupied_by_others(10 * MiB);
  EXPECT_EQ(backing.occupied_by_others(), 10 * MiB);
  EXPECT_EQ(backing.memory().total_bytes, 16 * MiB);
  EXPECT_EQ(backing.memory().free_bytes, 6 * MiB);
  EXPECT_FALSE(backing.map(base, 8 * MiB)) << "only 6 MiB are left to us";
  ASSERT_TRUE(backing.map(base, 6 * MiB));
  EXPECT_EQ(backing.memory().free_bytes, 0U);

  // Another process grabbing more than is left: nothing is free, nothing more maps, nothing underflows.
  backing.set_occupied_by_others(14 * MiB);
  EXPECT_EQ(backing.memory().free_bytes, 0U);
  EXPECT_FALSE(backing.map(base + 6 * MiB, 2 * MiB));
  backing.set_occupied_by_others(32 * MiB);
  EXPECT_EQ(backing.memory().free_bytes, 0U);

  backing.set_occupied_by_others(0);
  EXPECT_EQ(backing.memory().free_bytes, 10 * MiB);
  EXPECT_TRUE(backing.map(base + 6 * MiB, 10 * MiB));
  backing.unmap(base, 16 * MiB);
  backing.unreserve(base, 16 * MiB);
}

TEST(SimBacking, DoubleMapThrowsLogicError) {
  SimBacking backing(GiB);
  const std::uintptr_t base = backing.reserve(16 * MiB);
  ASSERT_NE(base, 0U);
  ASSERT_TRUE(backing.map(base + 4 * MiB, 4 * MiB));
  EXPECT_THROW(backing.map(base + 4 * MiB, 4 * MiB), std::logic_error) << "the same range";
  EXPECT_THROW(backing.map(base + 6 * MiB, 2 * MiB), std::logic_error) << "a granule inside it";
  EXPECT_THROW(backing.map(base + 2 * MiB, 4 * MiB), std::logic_error) << "overlapping its start";
  EXPECT_THROW(backing.map(base + 6 * MiB, 4 * MiB), std::logic_error) << "overlapping its end";
  EXPECT_THROW(backing.map(base, 16 * MiB), std::logic_error) << "covering it";
  EXPECT_EQ(backing.mapped_bytes(), 4 * MiB) << "a refused call maps nothing";
  EXPECT_TRUE(backing.map(base + 2 * MiB, 2 * MiB)) << "the granule right before it is free";
  EXPECT_TRUE(backing.map(base + 8 * MiB, 2 * MiB)) << "the granule right after it is free";
  backing.unmap(base + 2 * MiB, 8 * MiB);
  backing.unreserve(base, 16 * MiB);
}

TEST(SimBacking, MapOutsideAReservationThrowsLogicError) {
  SimBacking backing(GiB);
  const std::uintptr_t first = backing.reserve(8 * MiB);
  const std::uintptr_t second = backing.reserve(8 * MiB);
  ASSERT_NE(first, 0U);
  ASSERT_NE(second, 0U);
  EXPECT_THROW(backing.map(first + 8 * MiB, 2 * MiB), std::logic_error) << "just past the end";
  EXPECT_THROW(backing.map(first + 6 * MiB, 4 * MiB), std::logic_error) << "running past the end";
  EXPECT_THROW(backing.map(first - 2 * MiB, 2 * MiB), std::logic_error) << "before the start";
  EXPECT_THROW(backing.map(first, second + 8 * MiB - first), std::logic_error) << "across two reservations";
  EXPECT_THROW(backing.map(0x1000'0000, 2 * MiB), std::logic_error) << "never reserved";
  backing.unreserve(first, 8 * MiB);
  EXPECT_THROW(backing.map(first, 2 * MiB), std::logic_error) << "reservation released";
  backing.unreserve(second, 8 * MiB);
}

TEST(SimBacking, MisalignedCallsThrowLogicError) {
  SimBacking backing(GiB);
  const std::uintptr_t base = backing.reserve(8 * MiB);
  ASSERT_NE(base, 0U);
  EXPECT_THROW(backing.map(base + 4096, 2 * MiB), std::logic_error);
  EXPECT_THROW(backing.map(base, MiB), std::logic_error);
  EXPECT_THROW(backing.map(base, 0), std::logic_error);
  EXPECT_THROW(backing.reserve(3 * MiB), std::logic_error);
  EXPECT_THROW(backing.reserve(0), std::logic_error);
  try {
    backing.map(base, MiB);
  } catch (const std::logic_error& error) {
    EXPECT_NE(std::string(error.what()).find("granularity"), std::string::npos) << error.what();
  }
  backing.unreserve(base, 8 * MiB);
}

TEST(SimBacking, FreedGranulesCanBeMappedAgain) {
  SimBacking backing(GiB);
  const std::uintptr_t base = backing.reserve(8 * MiB);
  ASSERT_NE(base, 0U);
  for (int round = 0; round < 100; ++round) {
    ASSERT_TRUE(backing.map(base, 8 * MiB));
    backing.unmap(base + 2 * MiB, 2 * MiB);
    ASSERT_TRUE(backing.map(base + 2 * MiB, 2 * MiB));
    backing.unmap(base, 8 * MiB);
  }
  EXPECT_EQ(backing.mapped_bytes(), 0U);
  backing.unreserve(base, 8 * MiB);
}

TEST(SimBackingDeathTest, WrongUnmapOrUnreserveAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  SimBacking backing(GiB);
  const std::uintptr_t base = backing.reserve(8 * MiB);
  ASSERT_NE(base, 0U);
  EXPECT_DEATH(backing.unmap(base, 2 * MiB), "not mapped");
  ASSERT_TRUE(backing.map(base, 2 * MiB));
  EXPECT_DEATH(backing.unmap(base, 4 * MiB), "not mapped") << "only half of it is mapped";
  EXPECT_DEATH(backing.unmap(base + 8 * MiB, 2 * MiB), "not inside one reservation");
  EXPECT_DEATH(backing.unreserve(base, 8 * MiB), "still mapped");
  EXPECT_DEATH(backing.unreserve(base, 4 * MiB), "reserved with");
  EXPECT_DEATH(backing.unreserve(base + 2 * MiB, 6 * MiB), "no reservation starts there");
  backing.unmap(base, 2 * MiB);
  backing.unreserve(base, 8 * MiB);
}

TEST(SimBacking, ReserveReturnsZeroWhenSyntheticAddressSpaceRunsOut) {
  SimBacking backing(GiB);
  const std::uint64_t quarter = (SimBacking::kAddressLimit - SimBacking::kFirstAddress) / 4;
  EXPECT_NE(backing.reserve(quarter), 0U);
  EXPECT_NE(backing.reserve(quarter), 0U);
  EXPECT_NE(backing.reserve(quarter), 0U);
  EXPECT_EQ(backing.reserve(quarter), 0U) << "the guard granules used up the rest";
  EXPECT_NE(backing.reserve(2 * MiB), 0U);
}

TEST(SimBacking, RejectsBadConstruction) {
  EXPECT_THROW(SimBacking(0), InvalidArgument);
  EXPECT_THROW(SimBacking(GiB, 3 * MiB), InvalidArgument);
  EXPECT_THROW(SimBacking(GiB, 0), InvalidArgument);
}

TEST(SimBacking, DescribesItself) {
  const SimBacking backing(16 * GiB);
  EXPECT_NE(backing.describe().find("simulated"), std::string::npos) << backing.describe();
  EXPECT_NE(backing.describe().find("16"), std::string::npos) << backing.describe();
  EXPECT_EQ(backing.host_pages().committed_bytes, 0U);
}

}  // namespace
}  // namespace plimsoll::backings
