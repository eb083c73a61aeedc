// Allocator::description() while another thread changes the device's limits (set_limits, before the first
// allocation, as Runtime::configure does): each read is a copy taken under the device's lock, so it sees one
// set_limits call's limit and policy together, never a mix, and the name never changes. Run under TSan by the
// threads label, which also catches a read that is not under the lock.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backings/sim_backing.hpp"
#include "plimsoll/allocator.hpp"

namespace plimsoll {
namespace {

constexpr std::uint64_t MiB = std::uint64_t{1} << 20;

TEST(DeviceDescriptionThreads, ReadsWhileTheLimitsChangeSeeOneWholeSetting) {
  DeviceDescription description;
  description.name = "sim:4GiB";
  description.hardware = "simulated device";
  description.limit_bytes = 128 * MiB;
  description.total_bytes = 4096 * MiB;
  Allocator device(description, std::make_unique<backings::SimBacking>(4096 * MiB));
  Policy preallocated;
  preallocated.growth = Growth::preallocate;
  Policy on_demand;
  on_demand.growth = Growth::on_demand;
  const DeviceLimits settings[] = {{preallocated, 256 * MiB}, {on_demand, 512 * MiB}};

  std::atomic<bool> done{false};
  std::atomic<int> mixed{0}, renamed{0}, reads{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; ++t) {
    readers.emplace_back([&] {
      while (!done.load()) {
        const DeviceDescription seen = device.description();
        const bool first = seen.limit_bytes == 256 * MiB && seen.policy.growth == Growth::preallocate;
        const bool second = seen.limit_bytes == 512 * MiB && seen.policy.growth == Growth::on_demand;
        const bool initial = seen.limit_bytes == 128 * MiB;
        if (!first && !second && !initial) mixed.fetch_add(1);
        if (seen.name != "sim:4GiB" || seen.summary().find("sim:4GiB") == std::string::npos) renamed.fetch_add(1);
        reads.fetch_add(1);
      }
    });
  }
  while (reads.load() == 0) std::this_thread::yield();  // the readers are running before the limits change
  for (int i = 0; i < 400; ++i) device.set_limits(settings[i % 2]);
  done.store(true);
  for (std::thread& reader : readers) reader.join();

  EXPECT_EQ(mixed.load(), 0) << "a read saw one setting's limit with another's policy";
  EXPECT_EQ(renamed.load(), 0);
  const DeviceDescription last = device.description();
  EXPECT_EQ(last.limit_bytes, 512 * MiB);
  EXPECT_EQ(last.policy.growth, Growth::on_demand);
  EXPECT_EQ(last.hardware, "simulated device");
  EXPECT_EQ(last.total_bytes, 4096 * MiB);
}

}  // namespace
}  // namespace plimsoll
