// The heap's growth when host memory runs out (docs/engine.md, "Out of host memory"): Heap::map_exactly runs inside
// try_allocate, which is noexcept, and used to list its runs in a std::vector (std::terminate out of host memory).
// It allocates nothing now, and neither does the backing's book of the map. Failures are injected by replacing
// operator new in this test program (failing_operator_new.hpp); the test skips under a sanitizer.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>

#include "backings/sim_backing.hpp"
#include "plimsoll/allocator.hpp"

#include "failing_operator_new.hpp"
#include "sim_device.hpp"

namespace plimsoll {
namespace {

constexpr std::uint64_t MiB = std::uint64_t{1} << 20;

TEST(EngineHeapMapFaults, AGrowthOutOfHostMemoryMapsAndRecordsWithoutAllocating) {
  SKIP_UNLESS_NEW_CAN_FAIL();
  auto sim = std::make_unique<backings::SimBacking>(4ull << 30);
  const backings::SimBacking& backing = *sim;
  Allocator device(testing_support::sim_device(), std::move(sim));
  device.set_step_plan(false);
  device.deallocate(device.allocate(64 * MiB));  // the books (block records, address tables) have their room
  const std::uint64_t mapped_before = backing.mapped_bytes();
  void* grown = nullptr;
  {
    const ScopedFailures failing;
    grown = device.try_allocate(512 * MiB);  // past what is mapped: the heap maps more granules
  }
  ASSERT_NE(grown, nullptr);
  EXPECT_GT(backing.mapped_bytes(), mapped_before);
  const Stats stats = device.stats();
  EXPECT_EQ(stats.reserved_bytes, backing.mapped_bytes()) << "the heap's granule map and the backing's book agree";
  EXPECT_EQ(stats.in_use_bytes, 512 * MiB);
  device.deallocate(grown);
  device.trim();
  EXPECT_EQ(backing.mapped_bytes(), 0U);
}

}  // namespace
}  // namespace plimsoll
