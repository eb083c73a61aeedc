// IdleRelease: a device that saw no allocation or free for idle_after gives its cached memory back to the kernel;
// a busy one keeps it (the fast path of repeating steps). poll() takes the time, so these tests do not wait.
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "plimsoll/allocator.hpp"
#include "plimsoll/error.hpp"
#include "plimsoll/idle_release.hpp"
#include "plimsoll/runtime.hpp"
#include "plimsoll/size.hpp"
#include "plimsoll/stats.hpp"

namespace {

using ::testing::HasSubstr;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr std::uint64_t MiB = std::uint64_t{1} << 20;

plimsoll::Config quiet_host_config() {
  plimsoll::Config config;
  config.log_device_creation = false;
  config.default_policy.memory_limit = plimsoll::parse_size("1GiB");
  return config;
}

std::uint64_t cached(const plimsoll::Allocator& device) {
  const plimsoll::Stats stats = device.stats();
  return stats.reserved_bytes - stats.in_use_bytes;
}

// Leaves `bytes` cached: allocated, touched, freed.
void cache(plimsoll::Allocator& device, std::uint64_t bytes) {
  void* block = device.allocate(bytes);
  std::memset(block, 1, bytes);
  device.deallocate(block);
}

TEST(IdleRelease, AnIdleDeviceGivesItsCacheBackAfterIdleAfter) {
  plimsoll::Runtime runtime(quiet_host_config());
  plimsoll::Allocator& cpu = runtime.device("cpu");
  cache(cpu, 64 * MiB);
  ASSERT_GE(cached(cpu), 64 * MiB);

  plimsoll::IdleRelease release({&cpu});  // the host defaults: 1 s
  const Clock::time_point t0 = Clock::now();
  EXPECT_EQ(release.poll(t0), 0U);                       // first look: its activity is new
  EXPECT_EQ(release.poll(t0 + milliseconds(999)), 0U);   // quiet, not yet for 1 s
  EXPECT_GE(cached(cpu), 64 * MiB);
  const std::uint64_t unmaps_before = cpu.stats().unmaps;
  EXPECT_GE(release.poll(t0 + milliseconds(1000)), 64 * MiB);
  EXPECT_EQ(cached(cpu), 0U);
  EXPECT_GT(cpu.stats().unmaps, unmaps_before);
  EXPECT_EQ(release.releases(), 1U);
  EXPECT_GE(release.released_bytes(), 64 * MiB);
  EXPECT_EQ(release.poll(t0 + milliseconds(2000)), 0U);  // nothing left to give
}

TEST(IdleRelease, ABusyDeviceKeepsItsCache) {
  plimsoll::Runtime runtime(quiet_host_config());
  plimsoll::Allocator& cpu = runtime.device("cpu");
  plimsoll::IdleRelease release({&cpu});
  const Clock::time_point t0 = Clock::now();
  for (int step = 0; step < 20; ++step) {
    cache(cpu, 32 * MiB);  // a step: its working set is allocated and freed again
    EXPECT_EQ(release.poll(t0 + milliseconds(600) * step), 0U) << "step " << step;
  }
  EXPECT_GE(cached(cpu), 32 * MiB);
  const std::uint64_t maps = cpu.stats().maps;
  cache(cpu, 32 * MiB);
  EXPECT_EQ(cpu.stats().maps, maps) << "the next step reuses the cache without mapping";
}

TEST(IdleRelease, KeepCachedBytesAreLeftMapped) {
  plimsoll::Runtime runtime(quiet_host_config());
  plimsoll::Allocator& cpu = runtime.device("cpu");
  cache(cpu, 16 * MiB);
  plimsoll::IdleReleaseOptions options;
  options.keep_cached_bytes = 256 * MiB;
  plimsoll::IdleRelease release({&cpu}, options);
  const Clock::time_point t0 = Clock::now();
  release.poll(t0);
  EXPECT_EQ(release.poll(t0 + milliseconds(5000)), 0U);
  EXPECT_GE(cached(cpu), 16 * MiB);
}

TEST(IdleRelease, DevicesWatchedLaterAndLiveMemoryStay) {
  plimsoll::Runtime runtime(quiet_host_config());
  plimsoll::IdleRelease release;
  plimsoll::Allocator& cpu = runtime.device("cpu");
  release.watch(cpu);
  void* kept = cpu.allocate(8 * MiB);
  std::memset(kept, 2, 8 * MiB);
  cache(cpu, 64 * MiB);
  const Clock::time_point t0 = Clock::now();
  release.poll(t0);
  EXPECT_GT(release.poll(t0 + milliseconds(1500)), 0U);
  EXPECT_GE(cpu.stats().in_use_bytes, 8 * MiB);
  EXPECT_EQ(static_cast<unsigned char*>(kept)[8 * MiB - 1], 2);
  cpu.deallocate(kept);
}

TEST(IdleRelease, BadOptionsAreRefusedWithTheFix) {
  plimsoll::IdleReleaseOptions zero;
  zero.idle_after = milliseconds(0);
  try {
    plimsoll::IdleRelease release({}, zero);
    FAIL() << "a zero idle time was accepted";
  } catch (const plimsoll::InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("must be positive"));
  }
  plimsoll::IdleReleaseOptions slow_checks;
  slow_checks.idle_after = milliseconds(100);
  slow_checks.check_every = milliseconds(500);
  EXPECT_THROW(slow_checks.validate(), plimsoll::InvalidArgument);
  EXPECT_THROW(plimsoll::IdleRelease({nullptr}), plimsoll::InvalidArgument);
  EXPECT_NO_THROW(plimsoll::host_idle_release_defaults().validate());
}

}  // namespace
