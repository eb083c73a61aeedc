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

}  // namespace
}  // namespace plimsoll
