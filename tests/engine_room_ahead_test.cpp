// util/room_ahead.hpp, the one growth rule for vectors that must not allocate later (StreamOrder's batches, cross
// entries and event pool; MappingLedger's reservations): room made ahead is room (the insertions after it allocate
// nothing and move nothing), growth is geometric (a list grown by one per call reallocates a handful of times, not
// every time), and out of host memory the vector is left exactly as it was. Failures are injected by replacing
// operator new in this test program (failing_operator_new.hpp); those tests skip under a sanitizer.
#include <gtest/gtest.h>

#include <cstddef>
#include <new>
#include <vector>

#include "failing_operator_new.hpp"
#include "util/room_ahead.hpp"

namespace plimsoll::util {
namespace {

TEST(RoomAhead, InsertionsAfterMakingRoomAllocateNothing) {
  std::vector<int> list{1, 2, 3};
  make_room_for(list, 5);
  EXPECT_GE(list.capacity(), 8U);
  const int* const storage = list.data();
  for (int i = 0; i < 5; ++i) list.push_back(i);
  EXPECT_EQ(list.data(), storage) << "an insertion within the room made ahead reallocated";
  EXPECT_EQ(list.size(), 8U);
}

TEST(RoomAhead, GrowingByOnePerCallReallocatesGeometrically) {
  std::vector<std::size_t> list;
  int reallocations = 0;
  for (std::size_t i = 0; i < 10000; ++i) {
    const std::size_t before = list.capacity();
    make_room_for(list);
    if (list.capacity() != before) ++reallocations;
    const std::size_t* const storage = list.data();
    list.push_back(i);
    ASSERT_EQ(list.data(), storage) << "the push after make_room_for reallocated at " << i;
  }
  EXPECT_LE(reallocations, 12) << "reserve(size() + 1) would reallocate 10000 times";
  EXPECT_EQ(list.back(), 9999U);
}

TEST(RoomAhead, ReserveAheadCoversACountAboveTheSizeAndNeverShrinks) {
  std::vector<int> list;
  reserve_ahead(list, 100);
  EXPECT_GE(list.capacity(), 100U);
  EXPECT_TRUE(list.empty());
  const std::size_t capacity = list.capacity();
  reserve_ahead(list, 3);
  EXPECT_EQ(list.capacity(), capacity) << "room already there: nothing done";
  reserve_ahead(list, capacity + 1);
  EXPECT_GE(list.capacity(), 2 * capacity) << "at least doubling";
}

TEST(RoomAhead, OutOfHostMemoryLeavesTheVectorAsItWas) {
  SKIP_UNLESS_NEW_CAN_FAIL();
  std::vector<int> list{1, 2, 3, 4, 5, 6, 7, 8};
  ASSERT_EQ(list.size(), list.capacity()) << "full: the next room needs an allocation";
  const int* const storage = list.data();
  {
    const ScopedFailures failing;
    EXPECT_THROW(make_room_for(list), std::bad_alloc);
    EXPECT_THROW(reserve_ahead(list, 1000), std::bad_alloc);
  }
  EXPECT_EQ(list.data(), storage);
  EXPECT_EQ(list.capacity(), 8U);
  EXPECT_EQ(list, (std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8}));
  {
    const ScopedFailures failing;
    EXPECT_NO_THROW(reserve_ahead(list, 8)) << "room already there: no allocation to fail";
  }
}

}  // namespace
}  // namespace plimsoll::util
