// A host device's three kinds of "memory" (docs/engine.md, "Host memory"): the address space its heap reserves
// (what `top` shows as VIRT), the pages it has committed, and the pages resident in RAM. Each is checked against
// what the kernel itself reports in /proc/self/status, not against the allocator's own counters.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>

#include "plimsoll/runtime.hpp"
#include "plimsoll/size.hpp"
#include "plimsoll/stats.hpp"

namespace {

constexpr std::uint64_t MiB = std::uint64_t{1} << 20;

// A "VmSize:  1234 kB" line of /proc/self/status, in bytes.
std::uint64_t proc_status_bytes(const std::string& key) {
  std::ifstream status("/proc/self/status");
  std::string name;
  while (status >> name) {
    if (name == key + ":") {
      std::uint64_t kib = 0;
      status >> kib;
      return kib * 1024;
    }
    status.ignore(1 << 12, '\n');
  }
  ADD_FAILURE() << key << " is not in /proc/self/status";
  return 0;
}

plimsoll::Config on_demand_with_limit(const std::string& limit) {
  plimsoll::Config config;
  config.default_policy.growth = plimsoll::Growth::on_demand;
  config.default_policy.memory_limit = plimsoll::parse_size(limit);
  return config;
}

TEST(HostMemory, AddressSpaceIsReservedUpFrontButNeitherCommittedNorResident) {
  const std::uint64_t virt_before = proc_status_bytes("VmSize");
  plimsoll::Runtime runtime(on_demand_with_limit("1GiB"));
  plimsoll::Allocator& cpu = runtime.device("cpu");
  void* block = cpu.allocate(1 * MiB);
  const plimsoll::Stats stats = cpu.stats();
  const std::uint64_t virt_after = proc_status_bytes("VmSize");

  // The heap reserves several times its limit, so it can grow in place: VIRT grows by that much at once...
  EXPECT_GE(stats.address_space_bytes, 1024 * MiB);
  EXPECT_GE(virt_after - virt_before, stats.address_space_bytes);
  // ...while only the mapped granule is committed, and nothing is resident before it is touched.
  EXPECT_EQ(stats.committed_bytes, stats.reserved_bytes);
  EXPECT_LT(stats.committed_bytes, 64 * MiB);
  EXPECT_LT(stats.resident_bytes, 1 * MiB);
  cpu.deallocate(block);
}

TEST(HostMemory, TouchedPagesBecomeResidentAndCountInTheProcessRss) {
  plimsoll::Runtime runtime(on_demand_with_limit("1GiB"));
  plimsoll::Allocator& cpu = runtime.device("cpu");
  const std::uint64_t rss_before = proc_status_bytes("VmRSS");
  void* block = cpu.allocate(64 * MiB);
  std::memset(block, 1, 64 * MiB);
  const plimsoll::Stats stats = cpu.stats();
  const std::uint64_t rss_after = proc_status_bytes("VmRSS");

  EXPECT_GE(stats.committed_bytes, 64 * MiB);
  EXPECT_GE(stats.resident_bytes, 64 * MiB);
  EXPECT_LE(stats.resident_bytes, stats.committed_bytes);
  EXPECT_GE(rss_after - rss_before, 60 * MiB) << "the kernel's RSS must see the touched pages too";
  EXPECT_LE(stats.committed_bytes, stats.address_space_bytes);
  cpu.deallocate(block);
}

}  // namespace
