// The heap's growth when host memory runs out (docs/engine.md, "Out of host memory"): Heap::map_exactly runs inside
// try_allocate, which is noexcept, and used to list its runs in a std::vector (std::terminate out of host memory).
// It allocates nothing now, and neither does the backing's book of the map. Failures are injected by replacing
// operator new in this test program (failing_operator_new.hpp); the test skips under a sanitizer.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <new>

#include "backings/backing_adaptor.hpp"
#include "backings/sim_backing.hpp"
#include "plimsoll/allocator.hpp"
#include "plimsoll/oom.hpp"

#include "fake_cuda_device.hpp"
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

// A backing whose own books cannot grow throws std::bad_alloc from map() before it acts (backing.hpp): the heap declines
// for host memory, so allocate() throws std::bad_alloc, not an OutOfMemory naming the device, and nothing is mapped.
// Before, the exception left the noexcept try_allocate: std::terminate. No operator new failure: runs under sanitizers.
class BooksOutOfMemoryBacking final : public backings::OwningBackingAdaptor {
 public:
  BooksOutOfMemoryBacking()
      : OwningBackingAdaptor("books-out-of-memory", std::make_unique<backings::SimBacking>(4ull << 30)) {}
  bool fail_maps = false;
  int maps_before_failing = -1;  // >= 0: that many more maps succeed, then every one throws

 private:
  bool do_map(std::uintptr_t addr, std::uint64_t bytes) override {
    if (maps_before_failing == 0) fail_maps = true;
    if (maps_before_failing > 0) --maps_before_failing;
    if (fail_maps) throw std::bad_alloc();
    return upstream().map(addr, bytes);
  }
};

TEST(EngineHeapMapFaults, ABackingsBooksOutOfHostMemoryDeclineForHostMemory) {
  auto owned = std::make_unique<BooksOutOfMemoryBacking>();
  BooksOutOfMemoryBacking& backing = *owned;
  Allocator device(testing_support::sim_device(), std::move(owned));
  device.set_step_plan(false);
  device.deallocate(device.allocate(64 * MiB));
  const std::uint64_t mapped_before = backing.mapped_bytes();
  backing.fail_maps = true;
  EXPECT_EQ(device.try_allocate(512 * MiB), nullptr);
  bool bad_alloc = false, device_oom = false;
  try {
    device.deallocate(device.allocate(512 * MiB));
  } catch (const OutOfMemory&) {
    device_oom = true;
  } catch (const std::bad_alloc&) {
    bad_alloc = true;
  }
  EXPECT_TRUE(bad_alloc) << "the host's memory failed, not the device's";
  EXPECT_FALSE(device_oom);
  // The failed attempts may give cached granules back first (making room), never map more than is recorded.
  EXPECT_LE(backing.mapped_bytes(), mapped_before);
  EXPECT_EQ(device.stats().reserved_bytes, backing.mapped_bytes());
  EXPECT_EQ(device.stats().ooms, 0U);
  backing.fail_maps = false;
  device.deallocate(device.allocate(512 * MiB));
  EXPECT_EQ(device.stats().live_allocations, 0U);
}

// The CUDA virtual memory backing keeps each granule's allocation handle: the handle's entry is made before the
// driver's cuMemCreate, so out of host memory no granule is left mapped unrecorded (before: made after, std::bad_alloc
// with the granule mapped, out of the noexcept try_allocate: std::terminate). Over the fake driver: no GPU.
TEST(EngineHeapMapFaults, ACudaGranuleOutOfHostMemoryIsNotLeftMapped) {
  SKIP_UNLESS_NEW_CAN_FAIL();
  fake_cuda::Driver driver;
  auto device = fake_cuda::fake_cuda_allocator(driver, 64 * MiB);
  device->deallocate(device->allocate(4 * MiB));
  const std::uint64_t mapped_before = driver.mapped_bytes();
  void* refused = nullptr;
  {
    const ScopedFailures failing;
    refused = device->try_allocate(16 * MiB);
  }
  EXPECT_EQ(refused, nullptr);
  EXPECT_LE(driver.mapped_bytes(), mapped_before) << "a granule mapped that the backing did not record";
  EXPECT_EQ(device->stats().reserved_bytes, driver.mapped_bytes());
  device->deallocate(device->allocate(16 * MiB));
  device->trim();
  EXPECT_EQ(driver.mapped_bytes(), 0U);
}

// resume() maps the paused runs back one by one through Backing::map; a std::bad_alloc from the backing's books at
// the second run must leave the device paused with nothing mapped (the first run unmapped again), so a later resume
// works. Before, the first run stayed mapped and marked, and the next resume failed mapping it twice.
TEST(EngineHeapMapFaults, AResumeOutOfHostMemoryLeavesTheDevicePausedWithNothingMapped) {
  auto owned = std::make_unique<BooksOutOfMemoryBacking>();
  BooksOutOfMemoryBacking& backing = *owned;
  Allocator device(testing_support::sim_device(), std::move(owned));
  device.set_step_plan(false);
  void* first = device.allocate(64 * MiB);
  void* gap = device.allocate(64 * MiB);
  void* second = device.allocate(64 * MiB);
  device.deallocate(gap);  // pause gives the cache back: two runs of granules, one per live block
  device.pause(PauseOptions{.keep_contents = false});
  ASSERT_EQ(backing.mapped_bytes(), 0U);
  backing.maps_before_failing = 1;
  EXPECT_THROW(device.resume(), std::bad_alloc);
  EXPECT_TRUE(device.paused());
  EXPECT_EQ(backing.mapped_bytes(), 0U) << "the run mapped back before the failure is unmapped again";
  EXPECT_EQ(device.stats().reserved_bytes, 0U);
  backing.maps_before_failing = -1;
  backing.fail_maps = false;
  device.resume();
  EXPECT_FALSE(device.paused());
  EXPECT_EQ(device.stats().reserved_bytes, backing.mapped_bytes());
  EXPECT_GE(backing.mapped_bytes(), 128 * MiB);
  device.deallocate(first);
  device.deallocate(second);
  EXPECT_EQ(device.stats().live_allocations, 0U);
}

}  // namespace
}  // namespace plimsoll
