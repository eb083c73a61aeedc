// sharing::DriverGovernor (the interposer's policy) from several threads of one process at once, over stand-in
// driver calls (label threads, so the TSan phase runs it): every thread allocates and frees through admit /
// remember / take / credit, the job never holds more than its cap, and everything is credited back.
#include <atomic>
#include <cstdlib>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "sharing/driver_governor.hpp"
#include "sharing/ledger_scan.hpp"
#include "sharing_support.hpp"
#include "stand_in_driver.hpp"

namespace plimsoll::sharing {
namespace {

namespace cu = cuda_driver;
using plimsoll::testing::TempDirectory;
constexpr std::uint64_t MiB = std::uint64_t{1} << 20;
using testing_support::kGpuBytes;
using testing_support::stand_in_driver;

TEST(ThreadsDriverGovernor, ThreadsAllocatingAtOnceStayUnderTheCapAndAreCreditedBack) {
  const TempDirectory dir;
  DriverGovernor governor({parse_share_spec("cuda:0=64MiB:128MiB")}, stand_in_driver(), dir.path());
  ASSERT_TRUE(governor.governed());
  std::atomic<std::uint64_t> next_address{0x10000000};
  std::atomic<int> admitted{0}, refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 random(static_cast<std::uint64_t>(t));
      std::vector<std::uint64_t> live;
      for (int round = 0; round < 3000; ++round) {
        std::this_thread::yield();  // let the threads meet on two cores
        if (!live.empty() && (live.size() >= 8 || random() % 2 == 0)) {
          const auto charged = governor.take(live.back(), false);
          ASSERT_TRUE(charged.has_value());
          governor.credit(*charged);
          live.pop_back();
          continue;
        }
        const std::uint64_t bytes = (1 + random() % 16) * MiB;
        const auto device = governor.current_device();
        ASSERT_TRUE(device.has_value());
        if (governor.admit(*device, bytes, "cuMemAlloc") != cu::kSuccess) {
          ++refused;
          continue;
        }
        const std::uint64_t address = next_address.fetch_add(bytes);  // what the driver would hand out
        governor.remember(address, *device, bytes, false);
        live.push_back(address);
        ++admitted;
        const auto info = governor.memory_info(0, kGpuBytes);
        ASSERT_TRUE(info.has_value());
        ASSERT_EQ(info->second, 128 * MiB) << "cuMemGetInfo's total is the cap";
      }
      for (const std::uint64_t address : live) governor.credit(*governor.take(address, false));
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_GT(admitted.load(), 0);
  EXPECT_GT(refused.load(), 0) << "the threads met the cap";
  const auto readings = read_ledgers(dir.path());
  ASSERT_EQ(readings.size(), 1u);
  ASSERT_EQ(readings[0].snapshot->processes.size(), 1u);
  const ProcessRow& me = readings[0].snapshot->processes[0];
  EXPECT_LE(me.peak, 128 * MiB);
  EXPECT_EQ(me.charged, me.context) << "everything but the context was credited back";
  EXPECT_EQ(governor.total_memory(0), 128 * MiB);
  EXPECT_FALSE(governor.total_memory(1).has_value()) << "no share of cuda:1";
  EXPECT_EQ(governor.admit(1, MiB, "cuMemAlloc"), cu::kErrorOutOfMemory);
}

TEST(ThreadsDriverGovernor, AFreedAddressHandedOutAgainIsNeverCreditedTwice) {
  const TempDirectory dir;
  DriverGovernor governor({parse_share_spec("cuda:0=64MiB")}, stand_in_driver(), dir.path());
  ASSERT_EQ(governor.admit(0, 8 * MiB, "cuMemAllocAsync"), cu::kSuccess);
  governor.remember(0x1000, 0, 8 * MiB, false);
  // The free takes the charge out first; the pool hands the same address out again before the credit.
  const auto first = governor.take(0x1000, false);
  ASSERT_EQ(governor.admit(0, 4 * MiB, "cuMemAllocAsync"), cu::kSuccess);
  governor.remember(0x1000, 0, 4 * MiB, false);
  governor.credit(*first);
  const auto second = governor.take(0x1000, false);
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->bytes, 4 * MiB);
  governor.credit(*second);
  EXPECT_FALSE(governor.take(0x1000, false).has_value());
  const auto readings = read_ledgers(dir.path());
  EXPECT_EQ(readings.at(0).snapshot->processes.at(0).charged, 0u);
}

}  // namespace
}  // namespace plimsoll::sharing
