// IdleRelease's background thread against a thread that keeps allocating: nothing it holds is touched, the cache
// goes back once the allocations stop. Waits at most 20 s for the release (it comes after about 50 ms).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "plimsoll/allocator.hpp"
#include "plimsoll/idle_release.hpp"
#include "plimsoll/runtime.hpp"
#include "plimsoll/size.hpp"
#include "plimsoll/stats.hpp"

namespace {

constexpr std::uint64_t MiB = std::uint64_t{1} << 20;

TEST(ThreadsIdleRelease, BackgroundReleaseNeverTouchesLiveMemory) {
  plimsoll::Config config;
  config.log_device_creation = false;
  config.default_policy.memory_limit = plimsoll::parse_size("1GiB");
  plimsoll::Runtime runtime(config);
  plimsoll::Allocator& cpu = runtime.device("cpu");

  plimsoll::IdleReleaseOptions options;
  options.idle_after = std::chrono::milliseconds(20);
  options.check_every = std::chrono::milliseconds(1);
  plimsoll::IdleRelease release({&cpu}, options);
  release.start();

  std::atomic<bool> corrupted{false};
  std::thread worker([&] {
    for (int round = 0; round < 200; ++round) {
      std::vector<unsigned char*> blocks;
      for (int i = 0; i < 8; ++i) {
        auto* block = static_cast<unsigned char*>(cpu.allocate(MiB * static_cast<std::uint64_t>(1 + i)));
        std::memset(block, static_cast<int>(i + 1), MiB);
        blocks.push_back(block);
      }
      if (round % 50 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(30));  // idle with blocks live
      for (std::size_t i = 0; i < blocks.size(); ++i) {
        if (blocks[i][MiB - 1] != static_cast<unsigned char>(i + 1)) corrupted = true;
        cpu.deallocate(blocks[i]);
      }
      if (round % 40 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(30));  // idle, all cached
    }
  });
  worker.join();
  EXPECT_FALSE(corrupted.load());

  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (cpu.stats().reserved_bytes > cpu.stats().in_use_bytes && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  release.stop();
  EXPECT_EQ(cpu.stats().reserved_bytes, cpu.stats().in_use_bytes);
  EXPECT_GT(release.releases(), 0U);
  EXPECT_EQ(cpu.stats().live_allocations, 0U);
}

}  // namespace
