// Pause and resume (docs/engine.md): over the simulated device (addresses, mapped bytes, refusals while paused,
// a failed resume that leaves the device paused and resumable) and over host memory (contents kept and copied
// back, or not), plus every call made in the wrong order.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "backings/host_backing.hpp"
#include "backings/sim_backing.hpp"
#include "plimsoll/allocator.hpp"
#include "plimsoll/error.hpp"

namespace plimsoll {
namespace {

using ::testing::HasSubstr;
constexpr std::uint64_t MiB = std::uint64_t{1} << 20;

DeviceDescription description(std::uint64_t limit, Growth growth = Growth::on_demand) {
  DeviceDescription d;
  d.name = "sim:0";
  d.hardware = "simulated device";
  d.policy.growth = growth;
  d.limit_bytes = limit;
  d.total_bytes = limit;
  return d;
}

TEST(Pause, UnmapsEverythingKeepsAddressesAndMapsTheSameGranulesBack) {
  auto owned = std::make_unique<backings::SimBacking>(256 * MiB);
  backings::SimBacking& sim = *owned;
  Allocator device(description(128 * MiB), std::move(owned));
  std::vector<void*> blocks;
  for (std::size_t bytes : {40 * MiB, 3 * MiB, 100'000ul, 256ul, 17 * MiB}) blocks.push_back(device.allocate(bytes));
  device.deallocate(blocks[1]);  // a hole: its granules are cache, not mapped back
  blocks.erase(blocks.begin() + 1);
  const std::uint64_t live_mapped = device.stats().reserved_bytes;
  ASSERT_GT(sim.mapped_bytes(), 0u);

  const std::uint64_t unmapped = device.pause();
  EXPECT_TRUE(device.paused());
  EXPECT_EQ(sim.mapped_bytes(), 0u) << "the device holds nothing while paused";
  EXPECT_EQ(device.usage().reserved_bytes, 0u);
  EXPECT_GT(unmapped, 0u);
  EXPECT_LE(unmapped, live_mapped);
  for (void* block : blocks) EXPECT_TRUE(device.owns(block)) << "live allocations stay live, at their addresses";

  device.resume();
  EXPECT_FALSE(device.paused());
  EXPECT_EQ(sim.mapped_bytes(), unmapped) << "exactly what pause unmapped is mapped back";
  for (void* block : blocks) EXPECT_TRUE(device.owns(block));
  EXPECT_EQ(device.stats().reserved_bytes, unmapped);
  for (void* block : blocks) device.deallocate(block);
  void* again = device.allocate(60 * MiB);
  device.deallocate(again);
}

TEST(Pause, RefusesAllocationsWhilePausedAndTakesFrees) {
  Allocator device(description(64 * MiB), std::make_unique<backings::SimBacking>(64 * MiB));
  void* kept = device.allocate(8 * MiB);
  void* freed_while_paused = device.allocate(4 * MiB);
  device.pause();
  try {
    device.allocate(1 * MiB);
    FAIL() << "allocate on a paused device must throw";
  } catch (const InvalidState& e) {
    EXPECT_THAT(e.what(), HasSubstr("paused"));
    EXPECT_THAT(e.what(), HasSubstr("resume()"));
  }
  EXPECT_EQ(device.try_allocate(1 * MiB), nullptr);
  EXPECT_EQ(device.stats().ooms, 0u) << "a paused device's refusals are not out-of-memory events";
  device.deallocate(freed_while_paused);
  EXPECT_FALSE(device.owns(freed_while_paused));
  device.resume();
  EXPECT_TRUE(device.owns(kept));
  void* after = device.allocate(1 * MiB);
  EXPECT_NE(after, nullptr);
  device.deallocate(after);
  device.deallocate(kept);
}

TEST(Pause, WrongOrderAndPreallocatedDevicesAreRefusedWithTheReason) {
  Allocator device(description(64 * MiB), std::make_unique<backings::SimBacking>(64 * MiB));
  try {
    device.resume();
    FAIL() << "resume without pause";
  } catch (const InvalidState& e) {
    EXPECT_THAT(e.what(), HasSubstr("not paused"));
  }
  void* block = device.allocate(8 * MiB);
  device.pause();
  try {
    device.pause();
    FAIL() << "pause twice";
  } catch (const InvalidState& e) {
    EXPECT_THAT(e.what(), HasSubstr("paused already"));
  }
  EXPECT_TRUE(device.paused()) << "a refused second pause changes nothing";
  device.resume();
  EXPECT_TRUE(device.owns(block));
  device.deallocate(block);

  Allocator whole(description(32 * MiB, Growth::preallocate), std::make_unique<backings::SimBacking>(64 * MiB));
  try {
    whole.pause();
    FAIL() << "a preallocated device has no growable segments";
  } catch (const InvalidState& e) {
    EXPECT_THAT(e.what(), HasSubstr("preallocate"));
    EXPECT_THAT(e.what(), HasSubstr("on_demand"));
  }
  EXPECT_FALSE(whole.paused());
  EXPECT_EQ(whole.stats().reserved_bytes, 32 * MiB);
}

TEST(Pause, ContentsCannotBeKeptOnASimulatedDevice) {
  Allocator device(description(64 * MiB), std::make_unique<backings::SimBacking>(64 * MiB));
  void* block = device.allocate(8 * MiB);
  try {
    device.pause(PauseOptions{.keep_contents = true});
    FAIL() << "a simulated device has no contents to copy";
  } catch (const InvalidState& e) {
    EXPECT_THAT(e.what(), HasSubstr("pause it without keeping them"));
  }
  EXPECT_FALSE(device.paused());
  EXPECT_GT(device.stats().reserved_bytes, 0u) << "the refused pause left the live memory mapped";
  device.deallocate(block);
}

// check_pausable gives pause()'s refusals without touching the device: what a GPU's devices paused together ask of
// each before pausing any (runtime/allocator_group.cpp).
TEST(Pause, CheckPausableRefusesAsPauseWouldAndChangesNothing) {
  Allocator device(description(64 * MiB), std::make_unique<backings::SimBacking>(64 * MiB));
  void* block = device.allocate(8 * MiB);
  const std::uint64_t reserved = device.stats().reserved_bytes;
  EXPECT_NO_THROW(device.check_pausable());
  EXPECT_THROW(device.check_pausable(PauseOptions{.keep_contents = true}), InvalidState) << "no contents to copy";
  EXPECT_FALSE(device.paused());
  EXPECT_EQ(device.stats().reserved_bytes, reserved) << "checking released nothing";
  device.pause();
  EXPECT_THROW(device.check_pausable(), InvalidState) << "paused already";
  device.resume();
  device.deallocate(block);
  Allocator whole(description(32 * MiB, Growth::preallocate), std::make_unique<backings::SimBacking>(64 * MiB));
  EXPECT_THROW(whole.check_pausable(), InvalidState);
}

TEST(Pause, AFailedResumeLeavesTheDevicePausedAndResumable) {
  auto owned = std::make_unique<backings::SimBacking>(64 * MiB);
  backings::SimBacking& sim = *owned;
  Allocator device(description(64 * MiB), std::move(owned));
  void* first = device.allocate(20 * MiB);
  void* second = device.allocate(20 * MiB);
  const std::uint64_t unmapped = device.pause();
  sim.set_occupied_by_others(50 * MiB);  // another process took the memory meanwhile
  try {
    device.resume();
    FAIL() << "the memory is not there to map back";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("cannot resume sim:0"));
    EXPECT_THAT(e.what(), HasSubstr("stays paused with nothing lost"));
    EXPECT_THAT(e.what(), HasSubstr("call resume again"));
  }
  EXPECT_TRUE(device.paused());
  EXPECT_EQ(sim.mapped_bytes(), 0u) << "all or nothing: what the failed resume mapped is unmapped again";
  sim.set_occupied_by_others(0);
  device.resume();
  EXPECT_EQ(sim.mapped_bytes(), unmapped);
  EXPECT_TRUE(device.owns(first));
  EXPECT_TRUE(device.owns(second));
  device.deallocate(first);
  device.deallocate(second);
}

void fill(void* memory, std::size_t bytes, unsigned char seed) {
  auto* data = static_cast<unsigned char*>(memory);
  for (std::size_t i = 0; i < bytes; ++i) data[i] = static_cast<unsigned char>(seed + i * 7);
}
bool holds(const void* memory, std::size_t bytes, unsigned char seed) {
  const auto* data = static_cast<const unsigned char*>(memory);
  for (std::size_t i = 0; i < bytes; ++i)
    if (data[i] != static_cast<unsigned char>(seed + i * 7)) return false;
  return true;
}

TEST(Pause, HostMemoryKeepsItsContentsWhenAskedAndGivesThePagesBack) {
  auto owned = std::make_unique<backings::HostBacking>(backings::kDefaultGranularity, 256 * MiB);
  backings::HostBacking& host = *owned;
  DeviceDescription d = description(64 * MiB);
  d.name = "cpu";
  Allocator device(d, std::move(owned));
  void* big = device.allocate(9 * MiB);
  void* small = device.allocate(1000);
  fill(big, 9 * MiB, 3);
  fill(small, 1000, 11);
  EXPECT_GT(host.host_pages().committed_bytes, 0u);
  device.pause(PauseOptions{.keep_contents = true});
  EXPECT_EQ(host.host_pages().committed_bytes, 0u);
  device.resume();
  EXPECT_TRUE(holds(big, 9 * MiB, 3));
  EXPECT_TRUE(holds(small, 1000, 11));
  // Without keep_contents the memory comes back at the same addresses, usable, its bytes undefined.
  device.pause();
  device.resume();
  fill(big, 9 * MiB, 5);
  EXPECT_TRUE(holds(big, 9 * MiB, 5));
  device.deallocate(big);
  device.deallocate(small);
}

// Per-thread caches (Allocator::set_thread_cache) hold blocks that are live in the heap: a pause must take them
// back and stop the caches serving, or a cached block on unmapped memory could be handed out.
TEST(Pause, ThreadCachesServeNothingWhilePausedAndServeAgainAfterResume) {
  auto owned = std::make_unique<backings::SimBacking>(256 * MiB);
  backings::SimBacking& sim = *owned;
  Allocator device(description(64 * MiB), std::move(owned));
  device.set_thread_cache(1 * MiB);
  std::vector<void*> small;
  for (int i = 0; i < 64; ++i) small.push_back(device.allocate(4096));
  for (void* block : small) device.deallocate(block);  // into this thread's cache
  void* kept = device.allocate(8192);

  device.pause();
  EXPECT_EQ(sim.mapped_bytes(), 0u);
  EXPECT_EQ(device.try_allocate(4096), nullptr) << "a cached block must not be handed out while paused";
  EXPECT_THROW(device.allocate(4096), InvalidState);
  EXPECT_EQ(device.stats().ooms, 0u);
  EXPECT_TRUE(device.owns(kept));

  device.resume();
  void* again = device.allocate(4096);
  EXPECT_NE(again, nullptr);
  EXPECT_GT(sim.mapped_bytes(), 0u);
  device.deallocate(again);
  device.deallocate(kept);
  EXPECT_EQ(device.usage().in_use_bytes, 0u);
}

}  // namespace
}  // namespace plimsoll
