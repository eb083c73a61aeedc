// Allocator::allocate reads one word before the per-thread caches' hit (src/engine/allocator.cpp, `serving_front`: the
// front while it serves, else null). Whatever turns the front off (a recording attaching, set_thread_cache(0), a
// pause) clears it, and whatever turns it on again sets it. The word is a speed hint only: the front re-reads whether it
// serves inside its operation, and a null word still asks the front on the slow side, so these tests check what each
// state makes observable (blocks served or declined, recordings complete), not the word itself.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "backings/sim_backing.hpp"
#include "plimsoll/allocator.hpp"
#include "plimsoll/error.hpp"
#include "plimsoll/recording.hpp"
#include "plimsoll/trace.hpp"

namespace plimsoll {
namespace {

constexpr std::uint64_t MiB = 1ull << 20, GiB = 1ull << 30;

Allocator make_device() {
  DeviceDescription description;
  description.name = "sim:4GiB";
  description.limit_bytes = 1 * GiB;
  description.total_bytes = 4 * GiB;
  return Allocator(description, std::make_unique<backings::SimBacking>(4 * GiB));
}

// Allocates and frees `pairs` small blocks, one held at a time (at most 1,792 bytes); returns how many operations.
std::size_t churn(Allocator& device, int pairs) {
  for (int i = 0; i < pairs; ++i) device.deallocate(device.allocate(1024 + static_cast<std::uint64_t>(i % 4) * 256));
  return static_cast<std::size_t>(pairs) * 2;
}

// Whether a churn went through the caches: they take blocks from the heap in runs filling 2 KiB and keep freed blocks
// heap-live, so the heap's peak (which counts cached blocks) passes the 1,792 bytes the program ever held at once;
// the heap alone stays at them.
bool churn_went_through_the_caches(Allocator& device) {
  device.trim();  // nothing cached from before
  device.reset_peaks();
  churn(device, 16);
  return device.stats().peak_in_use_bytes > 1792;
}

TEST(EngineFrontEntry, ARecordingSeesEveryOperationWhileAttachedAndTheCachesServeAgainAfter) {
  Allocator device = make_device();
  device.set_thread_cache(MiB);
  churn(device, 64);  // warm: this thread's cache holds blocks of these sizes now
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("plimsoll-front-entry-" + std::to_string(::getpid()) + ".plimsoll"))
                               .string();
  auto recording = Recording::open(path, {.buffer_bytes = 0});
  device.record_to(recording);  // the front off: a cached block handed out now would be an event never recorded
  const std::size_t recorded_ops = churn(device, 100);
  device.record_to(nullptr);
  recording->close();
  const Trace trace = read_trace(path);
  std::filesystem::remove(path);
  EXPECT_EQ(trace.allocations + trace.frees, recorded_ops) << "a front hit bypassed the recording";

  EXPECT_TRUE(churn_went_through_the_caches(device)) << "the caches stayed off after the recording detached";
  const Stats stats = device.stats();
  EXPECT_EQ(stats.in_use_bytes, 0u);
  EXPECT_EQ(stats.allocations, stats.frees);
}

TEST(EngineFrontEntry, TurningTheCachesOffAndOnAgainTakesEffectAtTheNextAllocation) {
  Allocator device = make_device();
  EXPECT_FALSE(churn_went_through_the_caches(device)) << "the check cannot tell the caches from the heap";
  device.set_thread_cache(MiB);
  EXPECT_TRUE(churn_went_through_the_caches(device)) << "the caches did not serve once turned on";
  device.set_thread_cache(0);
  EXPECT_FALSE(churn_went_through_the_caches(device)) << "the caches served after set_thread_cache(0)";
  device.set_thread_cache(MiB);
  EXPECT_TRUE(churn_went_through_the_caches(device)) << "the caches stayed off after being turned on again";
  device.pause();
  EXPECT_ANY_THROW(device.allocate(1024)) << "a paused device handed out a block";
  device.resume();
  EXPECT_TRUE(churn_went_through_the_caches(device)) << "the caches stayed off after resume()";
  const Stats stats = device.stats();
  EXPECT_EQ(stats.in_use_bytes, 0u);
  EXPECT_EQ(stats.allocations, stats.frees);
}

// The front answers a request it declines with the device's own path (Allocator::front_declined, through
// ThreadCaches::allocate_or, so that allocate() is a tail call): a device at its limit must still throw its
// out-of-memory report from allocate() and answer null from try_allocate(), each counted once, and serve again once
// memory is freed.
TEST(EngineFrontEntry, ADeclinedRequestIsAnsweredByTheDevicesPathOnce) {
  Allocator device = make_device();  // a limit of 1 GiB
  device.set_thread_cache(MiB);
  std::vector<void*> held;
  constexpr std::uint64_t kBlock = 64 << 10;  // the largest size the front serves from its bins
  for (std::uint64_t i = 0; i < GiB / kBlock; ++i) held.push_back(device.allocate(kBlock));
  const std::uint64_t ooms_before = device.stats().ooms;
  EXPECT_THROW(device.allocate(kBlock), OutOfMemory) << "a decline at the limit did not reach the device's report";
  EXPECT_EQ(device.stats().ooms, ooms_before + 1) << "one request at the limit, counted once";
  EXPECT_EQ(device.try_allocate(kBlock), nullptr);
  device.deallocate(held.back());
  held.pop_back();
  void* again = device.allocate(kBlock);
  EXPECT_NE(again, nullptr);
  held.push_back(again);
  for (void* p : held) device.deallocate(p);
  const Stats stats = device.stats();
  EXPECT_EQ(stats.in_use_bytes, 0u);
  EXPECT_EQ(stats.requested_bytes, 0u);
  EXPECT_EQ(stats.allocations, stats.frees);
}

// The hit and the free work out the size class from the requested bytes ((bytes - 1) / 256, where 0 bytes wraps past
// every class): every boundary, 0 bytes included, is counted as the heap rounds it, cold (from the heap) and warm (from
// this thread's cache).
TEST(EngineFrontEntry, BoundarySizesThroughTheFrontCountAsTheHeapRoundsThem) {
  Allocator device = make_device();
  device.set_thread_cache(MiB);
  const std::vector<std::uint64_t> sizes = {0, 1, 255, 256, 257, 511, 512, 65279, 65280, 65281, 65535, 65536};
  for (int round = 0; round < 3; ++round) {
    std::vector<void*> held;
    std::uint64_t rounded_sum = 0, requested_sum = 0;
    for (std::uint64_t bytes : sizes) {
      held.push_back(device.allocate(bytes));
      rounded_sum += bytes == 0 ? 256 : (bytes + 255) / 256 * 256;
      requested_sum += bytes;
      const Stats stats = device.stats();
      EXPECT_EQ(stats.in_use_bytes, rounded_sum) << bytes << " bytes, round " << round;
      EXPECT_EQ(stats.requested_bytes, requested_sum) << bytes << " bytes, round " << round;
    }
    for (void* p : held) device.deallocate(p);
    const Stats stats = device.stats();
    EXPECT_EQ(stats.in_use_bytes, 0u) << "round " << round;
    EXPECT_EQ(stats.requested_bytes, 0u) << "round " << round;
    EXPECT_EQ(stats.allocations, stats.frees);
  }
  EXPECT_TRUE(churn_went_through_the_caches(device));
}

}  // namespace
}  // namespace plimsoll
