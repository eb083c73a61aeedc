// HostBacking against the real kernel: what is reserved, committed and resident is checked with mincore()
// and /proc/self/maps, not with the backing's own word.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "backings/host_backing.hpp"
#include "plimsoll/device.hpp"
#include "plimsoll/error.hpp"
#include "sanitized.hpp"

namespace plimsoll::backings {
namespace {

constexpr std::uint64_t MiB = std::uint64_t{1} << 20;
constexpr std::uint64_t GiB = std::uint64_t{1} << 30;

std::uint64_t page_size() { return static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE)); }

char* bytes_at(std::uintptr_t addr) { return reinterpret_cast<char*>(addr); }

/// Resident bytes in [addr, addr + bytes) as the kernel reports them.
std::uint64_t resident_in(std::uintptr_t addr, std::uint64_t bytes) {
  std::vector<unsigned char> in_ram(bytes / page_size());
  if (::mincore(bytes_at(addr), bytes, in_ram.data()) != 0) ADD_FAILURE() << "mincore: " << std::strerror(errno);
  return static_cast<std::uint64_t>(std::count_if(in_ram.begin(), in_ram.end(), [](unsigned char p) {
           return (p & 1U) != 0;
         })) *
         page_size();
}

/// Whether any mapping, accessible or not, covers the page at `addr` (mincore says ENOMEM otherwise).
bool address_space_held(std::uintptr_t addr) {
  unsigned char in_ram = 0;
  return ::mincore(bytes_at(addr), page_size(), &in_ram) == 0;
}

/// The permissions ("rw-p", "---p") /proc/self/maps gives the mapping holding `addr`; empty when none.
std::string permissions_at(std::uintptr_t addr) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    std::istringstream fields(line);
    std::string range;
    std::string permissions;
    fields >> range >> permissions;
    const auto dash = range.find('-');
    const std::uintptr_t begin = std::stoull(range.substr(0, dash), nullptr, 16);
    const std::uintptr_t end = std::stoull(range.substr(dash + 1), nullptr, 16);
    if (begin <= addr && addr < end) return permissions;
  }
  return {};
}

TEST(HostBacking, ReservesGranuleAlignedAddressSpaceWithoutCommitting) {
  HostBacking backing(2 * MiB, 1 * GiB);
  const std::uintptr_t base = backing.reserve(64 * MiB);
  ASSERT_NE(base, 0U);
  EXPECT_EQ(base % (2 * MiB), 0U);
  EXPECT_EQ(permissions_at(base), "---p");
  EXPECT_EQ(permissions_at(base + 64 * MiB - 1), "---p");
  EXPECT_EQ(backing.host_pages().committed_bytes, 0U);
  EXPECT_EQ(resident_in(base, 64 * MiB), 0U);
  backing.unreserve(base, 64 * MiB);
  EXPECT_FALSE(address_space_held(base));
}

TEST(HostBacking, MapTouchUnmapCommitsAndReleasesPages) {
  HostBacking backing(2 * MiB, 1 * GiB);
  const std::uintptr_t base = backing.reserve(32 * MiB);
  ASSERT_NE(base, 0U);
  const std::uintptr_t addr = base + 4 * MiB;

  ASSERT_TRUE(backing.map(addr, 8 * MiB));
  EXPECT_EQ(permissions_at(addr), "rw-p");
  EXPECT_EQ(backing.host_pages().committed_bytes, 8 * MiB);
  EXPECT_EQ(backing.host_pages().resident_bytes, 0U) << "map() must not touch the pages";

  std::memset(bytes_at(addr), 0x5a, 8 * MiB);
  EXPECT_GE(backing.host_pages().resident_bytes, 8 * MiB);
  EXPECT_GE(resident_in(addr, 8 * MiB), 8 * MiB);

  backing.unmap(addr, 8 * MiB);
  EXPECT_EQ(permissions_at(addr), "---p");
  EXPECT_EQ(backing.host_pages().committed_bytes, 0U);
  EXPECT_EQ(backing.host_pages().resident_bytes, 0U);
  EXPECT_EQ(resident_in(addr, 8 * MiB), 0U) << "unmap() must give the pages back to the kernel";
  EXPECT_TRUE(address_space_held(addr)) << "unmap() must keep the address space reserved";
  backing.unreserve(base, 32 * MiB);
}

TEST(HostBacking, RemappedMemoryIsFreshZeroPages) {
  HostBacking backing(2 * MiB, 1 * GiB);
  const std::uintptr_t base = backing.reserve(2 * MiB);
  ASSERT_NE(base, 0U);
  ASSERT_TRUE(backing.map(base, 2 * MiB));
  std::memset(bytes_at(base), 0xab, 2 * MiB);
  backing.unmap(base, 2 * MiB);
  ASSERT_TRUE(backing.map(base, 2 * MiB));
  const char* memory = bytes_at(base);
  EXPECT_TRUE(std::all_of(memory, memory + 2 * MiB, [](char c) { return c == 0; }))
      << "old contents survived unmap(): the pages were not dropped";
  backing.unmap(base, 2 * MiB);
  backing.unreserve(base, 2 * MiB);
}

TEST(HostBacking, PartialUnmapKeepsTheRestMapped) {
  HostBacking backing(2 * MiB, 1 * GiB);
  const std::uintptr_t base = backing.reserve(8 * MiB);
  ASSERT_NE(base, 0U);
  ASSERT_TRUE(backing.map(base, 8 * MiB));
  std::memset(bytes_at(base), 1, 8 * MiB);
  backing.unmap(base + 2 * MiB, 2 * MiB);
  EXPECT_EQ(backing.host_pages().committed_bytes, 6 * MiB);
  EXPECT_GE(backing.host_pages().resident_bytes, 6 * MiB);
  EXPECT_LE(backing.host_pages().resident_bytes, 6 * MiB);
  EXPECT_EQ(bytes_at(base)[0], 1);
  EXPECT_EQ(bytes_at(base + 4 * MiB)[0], 1);
  EXPECT_EQ(permissions_at(base + 2 * MiB), "---p");
  backing.unmap(base, 2 * MiB);
  backing.unmap(base + 4 * MiB, 4 * MiB);
  EXPECT_EQ(backing.host_pages().committed_bytes, 0U);
  backing.unreserve(base, 8 * MiB);
}

TEST(HostBacking, HugeReservationCommitsNothing) {
  HostBacking backing;  // default capacity: the host's limit
  const std::uint64_t span = 64 * GiB;
  const std::uintptr_t base = backing.reserve(span);
  ASSERT_NE(base, 0U) << "64 GiB of address space should always be available on a 64-bit host";
  EXPECT_EQ(backing.host_pages().committed_bytes, 0U);
  EXPECT_EQ(backing.host_pages().resident_bytes, 0U);
  EXPECT_EQ(resident_in(base, 64 * MiB), 0U);

  // Its far end is usable like any other granule.
  const std::uintptr_t last = base + span - 2 * MiB;
  ASSERT_TRUE(backing.map(last, 2 * MiB));
  std::memset(bytes_at(last), 7, 2 * MiB);
  EXPECT_EQ(backing.host_pages().committed_bytes, 2 * MiB);
  EXPECT_GE(backing.host_pages().resident_bytes, 2 * MiB);
  backing.unmap(last, 2 * MiB);
  backing.unreserve(base, span);
  EXPECT_FALSE(address_space_held(base));
  EXPECT_FALSE(address_space_held(last));
}

TEST(HostBacking, CapacityLimitFailsMapCleanly) {
  HostBacking backing(2 * MiB, 8 * MiB);
  const std::uintptr_t base = backing.reserve(16 * MiB);
  ASSERT_NE(base, 0U);
  ASSERT_TRUE(backing.map(base, 6 * MiB));
  EXPECT_FALSE(backing.map(base + 6 * MiB, 4 * MiB)) << "6 + 4 MiB exceeds the 8 MiB capacity";
  EXPECT_EQ(backing.host_pages().committed_bytes, 6 * MiB);
  EXPECT_EQ(permissions_at(base + 6 * MiB), "---p") << "a failed map() must leave nothing mapped";
  EXPECT_EQ(permissions_at(base + 8 * MiB), "---p");

  ASSERT_TRUE(backing.map(base + 6 * MiB, 2 * MiB)) << "exactly up to capacity is allowed";
  EXPECT_FALSE(backing.map(base + 8 * MiB, 2 * MiB));
  backing.unmap(base, 2 * MiB);
  EXPECT_TRUE(backing.map(base + 8 * MiB, 2 * MiB)) << "unmapping makes room again";
  backing.unmap(base + 2 * MiB, 8 * MiB);
  backing.unreserve(base, 16 * MiB);
}

TEST(HostBacking, MapLargerThanCapacityFails) {
  HostBacking backing(2 * MiB, 4 * MiB);
  const std::uintptr_t base = backing.reserve(8 * MiB);
  ASSERT_NE(base, 0U);
  EXPECT_FALSE(backing.map(base, 8 * MiB));
  EXPECT_EQ(backing.host_pages().committed_bytes, 0U);
  backing.unreserve(base, 8 * MiB);
}

TEST(HostBacking, MemoryReportsCapacityAndWhatIsLeft) {
  HostBacking backing(2 * MiB, 64 * MiB);
  const std::uintptr_t base = backing.reserve(16 * MiB);
  ASSERT_NE(base, 0U);
  ASSERT_TRUE(backing.map(base, 8 * MiB));
  const BackingMemory memory = backing.memory();
  EXPECT_EQ(memory.total_bytes, 64 * MiB);
  const std::uint64_t available = scan_host().available_ram_bytes;
  EXPECT_EQ(memory.free_bytes, std::min(56 * MiB, available));
  backing.unmap(base, 8 * MiB);
  backing.unreserve(base, 16 * MiB);
}

TEST(HostBacking, DefaultCapacityIsTheHostLimit) {
  HostBacking backing;
  EXPECT_EQ(backing.capacity(), scan_host().limit_bytes());
  EXPECT_EQ(backing.granularity(), 2 * MiB);
  EXPECT_TRUE(backing.touchable());
  EXPECT_NE(backing.describe().find("host"), std::string::npos);
}

TEST(HostBacking, RejectsGranularityThatIsNotAPowerOfTwoPageMultiple) {
  EXPECT_THROW(HostBacking(3 * MiB, GiB), InvalidArgument);
  EXPECT_THROW(HostBacking(0, GiB), InvalidArgument);
  EXPECT_THROW(HostBacking(page_size() / 2, GiB), InvalidArgument);
  EXPECT_NO_THROW(HostBacking(page_size(), GiB));
  try {
    HostBacking bad(3 * MiB, GiB);
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("power-of-two"), std::string::npos) << error.what();
  }
}

TEST(HostBacking, WrongMapCallsThrowLogicError) {
  HostBacking backing(2 * MiB, GiB);
  const std::uintptr_t base = backing.reserve(8 * MiB);
  ASSERT_NE(base, 0U);
  EXPECT_THROW(backing.map(base + 4096, 2 * MiB), std::logic_error) << "misaligned";
  EXPECT_THROW(backing.map(base + 6 * MiB, 4 * MiB), std::logic_error) << "runs past the reservation";
  EXPECT_THROW(backing.map(base - 2 * MiB, 2 * MiB), std::logic_error) << "before the reservation";
  ASSERT_TRUE(backing.map(base, 4 * MiB));
  EXPECT_THROW(backing.map(base + 2 * MiB, 4 * MiB), std::logic_error) << "overlaps a mapped granule";
  EXPECT_EQ(backing.host_pages().committed_bytes, 4 * MiB);
  EXPECT_THROW(backing.reserve(3 * MiB), std::logic_error);
  backing.unmap(base, 4 * MiB);
  backing.unreserve(base, 8 * MiB);
}

TEST(HostBackingDeathTest, UnmapOfUnmappedMemoryAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  HostBacking backing(2 * MiB, GiB);
  const std::uintptr_t base = backing.reserve(8 * MiB);
  ASSERT_NE(base, 0U);
  EXPECT_DEATH(backing.unmap(base, 2 * MiB), "not mapped");
  EXPECT_DEATH(backing.unreserve(base + 2 * MiB, 6 * MiB), "no reservation starts there");
  backing.unreserve(base, 8 * MiB);
}

// The rule for every backing (backings/backing.hpp): unmap first. The host backing used to unmap quietly.
TEST(HostBackingDeathTest, UnreserveWithMappedGranulesAborts) {
  HostBacking backing(2 * MiB, GiB);
  const std::uintptr_t base = backing.reserve(8 * MiB);
  ASSERT_NE(base, 0U);
  ASSERT_TRUE(backing.map(base, 4 * MiB));
  EXPECT_DEATH(backing.unreserve(base, 8 * MiB), "host backing misused.*4194304 bytes inside are still mapped");
  backing.unmap(base, 4 * MiB);
  backing.unreserve(base, 8 * MiB);
  EXPECT_EQ(backing.host_pages().committed_bytes, 0U);
  EXPECT_FALSE(address_space_held(base));
}

TEST(HostBacking, DestructorReleasesLeftoverReservations) {
  std::uintptr_t base = 0;
  {
    HostBacking backing(2 * MiB, GiB);
    base = backing.reserve(8 * MiB);
    ASSERT_NE(base, 0U);
    ASSERT_TRUE(backing.map(base, 2 * MiB));
    std::memset(bytes_at(base), 1, 2 * MiB);
  }
  EXPECT_FALSE(address_space_held(base));
}

TEST(HostBacking, StatsCanBeReadWhileMapping) {
  HostBacking backing(2 * MiB, 64 * MiB);
  const std::uintptr_t base = backing.reserve(32 * MiB);
  ASSERT_NE(base, 0U);
  std::atomic<bool> done{false};
  std::atomic<bool> consistent{true};
  std::thread reader([&] {
    while (!done.load()) {
      const HostPages pages = backing.host_pages();
      const BackingMemory memory = backing.memory();
      if (pages.committed_bytes % (2 * MiB) != 0 || pages.committed_bytes > 32 * MiB ||
          memory.free_bytes > 64 * MiB)
        consistent = false;
    }
  });
  for (int round = 0; round < 200; ++round) {
    const std::uintptr_t addr = base + static_cast<std::uint64_t>(round % 8) * 4 * MiB;
    ASSERT_TRUE(backing.map(addr, 4 * MiB));
    bytes_at(addr)[0] = 1;
    backing.unmap(addr, 4 * MiB);
  }
  done = true;
  reader.join();
  EXPECT_TRUE(consistent.load());
  EXPECT_EQ(backing.host_pages().committed_bytes, 0U);
  backing.unreserve(base, 32 * MiB);
}

std::uint64_t max_map_count() {
  std::ifstream file("/proc/sys/vm/max_map_count");
  std::uint64_t count = 0;
  file >> count;
  return count;
}

// Mapping every other page splits the reservation into one kernel mapping per page until the kernel's
// per-process limit refuses mprotect() with ENOMEM: map() must then say no and leave the range unmapped.
TEST(HostBacking, KernelRefusalFailsMapCleanly) {
#ifdef PLIMSOLL_SANITIZED
  GTEST_SKIP() << "exhausts vm.max_map_count, after which the sanitizer's allocator cannot map its own memory";
#endif
  const std::uint64_t limit = max_map_count();
  if (limit == 0 || limit > 200000) GTEST_SKIP() << "vm.max_map_count is " << limit << ": too slow to exhaust";
  const std::uint64_t page = page_size();
  HostBacking backing(page, 64 * GiB);
  const std::uint64_t pages = 2 * limit + 16;
  const std::uintptr_t base = backing.reserve(pages * page);
  ASSERT_NE(base, 0U);

  std::vector<std::uintptr_t> mapped;
  mapped.reserve(limit + 1);
  std::uintptr_t refused = 0;
  for (std::uint64_t i = 0; i < pages; i += 2) {
    const std::uintptr_t addr = base + i * page;
    if (!backing.map(addr, page)) {
      refused = addr;
      break;
    }
    mapped.push_back(addr);
  }
  const std::uint64_t committed_at_refusal = backing.host_pages().committed_bytes;
  const std::string refused_permissions = refused != 0 ? permissions_at(refused) : std::string();
  for (const std::uintptr_t addr : mapped) backing.unmap(addr, page);  // frees kernel mappings before asserting

  ASSERT_NE(refused, 0U) << "the kernel never refused";
  EXPECT_EQ(committed_at_refusal, mapped.size() * page);
  EXPECT_EQ(refused_permissions, "---p");
  EXPECT_EQ(backing.host_pages().committed_bytes, 0U);
  EXPECT_TRUE(backing.map(refused, page)) << "with the mappings merged back, the same page maps";
  backing.unmap(refused, page);
  backing.unreserve(base, pages * page);
}

}  // namespace
}  // namespace plimsoll::backings
