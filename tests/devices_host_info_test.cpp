#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "devices/cgroup_limit.hpp"
#include "plimsoll/device.hpp"
#include "plimsoll/error.hpp"

namespace plimsoll {
namespace {

using ::testing::HasSubstr;
using ::testing::Optional;

constexpr std::uint64_t kKiB = 1024;
constexpr std::uint64_t kGiB = kKiB * kKiB * kKiB;

// Trimmed from a real machine; the lines plimsoll does not read stay in to show they are skipped.
constexpr const char* kMeminfo =
    "MemTotal:       16318412 kB\n"
    "MemFree:         1123456 kB\n"
    "MemAvailable:    9876543 kB\n"
    "Buffers:          234567 kB\n"
    "Cached:          7654321 kB\n"
    "SwapCached:            0 kB\n"
    "HugePages_Total:       0\n"
    "Hugepagesize:       2048 kB\n";

std::string meminfo_error(std::string_view meminfo) {
  try {
    parse_host_info(meminfo, std::nullopt);
    ADD_FAILURE() << "accepted meminfo:\n" << meminfo;
  } catch (const InvalidArgument& error) {
    return error.what();
  }
  return {};
}

TEST(ParseHostInfo, ReadsTotalAndAvailableInBytes) {
  const HostInfo host = parse_host_info(kMeminfo, std::nullopt);
  EXPECT_EQ(host.total_ram_bytes, 16318412 * kKiB);
  EXPECT_EQ(host.available_ram_bytes, 9876543 * kKiB);
  EXPECT_EQ(host.cgroup_limit_bytes, std::nullopt);
  EXPECT_EQ(host.limit_bytes(), 16318412 * kKiB);
}

TEST(ParseHostInfo, FieldOrderDoesNotMatter) {
  const HostInfo host = parse_host_info("MemAvailable: 5 kB\nFoo: bar\nMemTotal: 10 kB", std::nullopt);
  EXPECT_EQ(host.total_ram_bytes, 10 * kKiB);
  EXPECT_EQ(host.available_ram_bytes, 5 * kKiB);
}

TEST(ParseHostInfo, CgroupMaxMeansNoLimit) {
  EXPECT_EQ(parse_host_info(kMeminfo, "max\n").cgroup_limit_bytes, std::nullopt);
  EXPECT_EQ(parse_host_info(kMeminfo, "max").limit_bytes(), 16318412 * kKiB);
}

TEST(ParseHostInfo, CgroupLimitBelowRamIsTheLimit) {
  const HostInfo host = parse_host_info(kMeminfo, "8589934592\n");
  EXPECT_THAT(host.cgroup_limit_bytes, Optional(8 * kGiB));
  EXPECT_EQ(host.limit_bytes(), 8 * kGiB);
  EXPECT_EQ(host.total_ram_bytes, 16318412 * kKiB);  // the RAM itself is still reported
}

TEST(ParseHostInfo, CgroupLimitAboveRamLeavesRamTheLimit) {
  const HostInfo host = parse_host_info(kMeminfo, "1099511627776");
  EXPECT_THAT(host.cgroup_limit_bytes, Optional(1024 * kGiB));
  EXPECT_EQ(host.limit_bytes(), 16318412 * kKiB);
}

TEST(ParseHostInfo, MalformedCgroupTextIsRejected) {
  for (const char* text : {"", "lots", "-1", "8G", "1.5", "max max", "18446744073709551616"}) {
    EXPECT_THROW(parse_host_info(kMeminfo, text), InvalidArgument) << text;
  }
  try {
    parse_host_info(kMeminfo, "lots");
  } catch (const InvalidArgument& error) {
    EXPECT_THAT(error.what(), HasSubstr("\"lots\""));
    EXPECT_THAT(error.what(), HasSubstr("expected a byte count or \"max\""));
  }
}

TEST(ParseHostInfo, MissingMemTotalIsRejected) {
  EXPECT_THAT(meminfo_error("MemAvailable: 5 kB\n"), HasSubstr("no MemTotal"));
  EXPECT_THAT(meminfo_error(""), HasSubstr("no MemTotal"));
  EXPECT_THAT(meminfo_error("not meminfo at all"), HasSubstr("no MemTotal"));
}

TEST(ParseHostInfo, MalformedLinesAreRejectedByName) {
  const std::string message = meminfo_error("MemTotal:  lots kB\nMemAvailable: 5 kB\n");
  EXPECT_THAT(message, HasSubstr("\"MemTotal:  lots kB\""));
  EXPECT_THAT(message, HasSubstr("MemTotal: <number> kB"));
  EXPECT_THAT(meminfo_error("MemTotal: 100 MB\nMemAvailable: 5 kB"), HasSubstr("malformed"));
  EXPECT_THAT(meminfo_error("MemTotal: 100\nMemAvailable: 5 kB"), HasSubstr("malformed"));
  EXPECT_THAT(meminfo_error("MemTotal: -100 kB\nMemAvailable: 5 kB"), HasSubstr("malformed"));
  EXPECT_THAT(meminfo_error("MemTotal: 10 kB\nMemAvailable: 5.5 kB"), HasSubstr("MemAvailable"));
  // Too many kB to count in bytes.
  EXPECT_THAT(meminfo_error("MemTotal: 18014398509481984 kB\nMemAvailable: 5 kB"), HasSubstr("malformed"));
  EXPECT_THAT(meminfo_error("MemTotal: 99999999999999999999999 kB\nMemAvailable: 5 kB"), HasSubstr("malformed"));
}

TEST(ParseHostInfo, OldKernelsWithoutMemAvailableFallBackToFreeAndCaches) {
  const HostInfo host =
      parse_host_info("MemTotal: 1000 kB\nMemFree: 100 kB\nBuffers: 20 kB\nCached: 300 kB\n", std::nullopt);
  EXPECT_EQ(host.available_ram_bytes, 420 * kKiB);
  EXPECT_EQ(parse_host_info("MemTotal: 1000 kB\nMemFree: 100 kB\n", std::nullopt).available_ram_bytes, 100 * kKiB);
  // Never more available than there is.
  EXPECT_EQ(parse_host_info("MemTotal: 100 kB\nMemFree: 90 kB\nCached: 90 kB\n", std::nullopt).available_ram_bytes,
            100 * kKiB);
  EXPECT_THAT(meminfo_error("MemTotal: 1000 kB\nCached: 300 kB\n"), HasSubstr("neither MemAvailable nor MemFree"));
}

TEST(ParseHostInfo, FirstOfARepeatedFieldWins) {
  const HostInfo host = parse_host_info("MemTotal: 10 kB\nMemTotal: 20 kB\nMemAvailable: 1 kB\n", std::nullopt);
  EXPECT_EQ(host.total_ram_bytes, 10 * kKiB);
}

TEST(ParseHostInfo, WindowsLineEndsAreTolerated) {
  const HostInfo host = parse_host_info("MemTotal: 10 kB\r\nMemAvailable: 4 kB\r\n", "1024\r\n");
  EXPECT_EQ(host.total_ram_bytes, 10 * kKiB);
  EXPECT_EQ(host.available_ram_bytes, 4 * kKiB);
  EXPECT_THAT(host.cgroup_limit_bytes, Optional(kKiB));
}

TEST(HostInfoLimit, IsTheSmallerOfRamAndCgroup) {
  HostInfo host;
  host.total_ram_bytes = 100;
  EXPECT_EQ(host.limit_bytes(), 100u);
  host.cgroup_limit_bytes = 40;
  EXPECT_EQ(host.limit_bytes(), 40u);
  host.cgroup_limit_bytes = 400;
  EXPECT_EQ(host.limit_bytes(), 100u);
  host.cgroup_limit_bytes = 0;
  EXPECT_EQ(host.limit_bytes(), 0u);
}

TEST(CgroupPath, FindsTheUnifiedHierarchyLine) {
  EXPECT_THAT(cgroup::v2_path("0::/user.slice/user-1000.slice/session-2.scope\n"),
              Optional(std::string("/user.slice/user-1000.slice/session-2.scope")));
  EXPECT_THAT(cgroup::v2_path("12:memory:/docker/abc\n1:cpu:/\n0::/system.slice/x.service\n"),
              Optional(std::string("/system.slice/x.service")));
  EXPECT_THAT(cgroup::v2_path("0::/"), Optional(std::string("/")));
}

TEST(CgroupPath, AbsentOnV1OnlyHosts) {
  EXPECT_EQ(cgroup::v2_path("4:memory:/process_api/c2df\n1:cpu:/\n"), std::nullopt);
  EXPECT_EQ(cgroup::v2_path(""), std::nullopt);
  EXPECT_EQ(cgroup::v2_path("10::/not-hierarchy-zero\n"), std::nullopt);
}

/// A fake cgroup v2 mount in a fresh temporary directory.
class CgroupTree : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
    mount_ = std::filesystem::temp_directory_path() /
             ("plimsoll-cgroup-" + std::to_string(getpid()) + "-" + test->name());
    std::filesystem::remove_all(mount_);
    std::filesystem::create_directories(mount_);
  }
  void TearDown() override { std::filesystem::remove_all(mount_); }

  void write_memory_max(const std::filesystem::path& cgroup, const std::string& text) {
    std::filesystem::create_directories(mount_ / cgroup);
    std::ofstream(mount_ / cgroup / "memory.max") << text;
  }

  std::filesystem::path mount_;
};

TEST_F(CgroupTree, OwnLimit) {
  write_memory_max("a/b", "1073741824\n");
  EXPECT_THAT(cgroup::memory_limit(mount_, "/a/b"), Optional(kGiB));
}

TEST_F(CgroupTree, AParentLimitBindsAChildWithoutOne) {
  write_memory_max("a", "536870912\n");
  write_memory_max("a/b", "max\n");
  EXPECT_THAT(cgroup::memory_limit(mount_, "/a/b"), Optional(kGiB / 2));
}

TEST_F(CgroupTree, TheSmallestLimitOnThePathWins) {
  write_memory_max("a", "4294967296\n");
  write_memory_max("a/b", "1073741824\n");
  write_memory_max("a/b/c", "2147483648\n");
  EXPECT_THAT(cgroup::memory_limit(mount_, "/a/b/c"), Optional(kGiB));
  // A sibling's limit is not on the path.
  write_memory_max("a/other", "1\n");
  EXPECT_THAT(cgroup::memory_limit(mount_, "/a/b/c"), Optional(kGiB));
}

TEST_F(CgroupTree, NoLimitAnywhere) {
  write_memory_max("a", "max\n");
  write_memory_max("a/b", "max\n");
  EXPECT_EQ(cgroup::memory_limit(mount_, "/a/b"), std::nullopt);
  EXPECT_EQ(cgroup::memory_limit(mount_, "/not/there"), std::nullopt);
}

TEST_F(CgroupTree, TheMountRootCountsForContainersWithoutACgroupNamespace) {
  // Docker without a cgroup namespace: /proc/self/cgroup names the host's path, but the container's own cgroup
  // is mounted at the root.
  write_memory_max("", "268435456\n");
  EXPECT_THAT(cgroup::memory_limit(mount_, "/docker/0123abcd"), Optional(kGiB / 4));
  EXPECT_THAT(cgroup::memory_limit(mount_, "/"), Optional(kGiB / 4));
}

TEST_F(CgroupTree, UnreadableOrStrangeFilesAreSkipped) {
  write_memory_max("a", "garbage\n");
  write_memory_max("a/b", "2147483648\n");
  EXPECT_THAT(cgroup::memory_limit(mount_, "/a/b"), Optional(2 * kGiB));
}

TEST_F(CgroupTree, PathsLeavingTheNamespaceStopAtTheRoot) {
  write_memory_max("", "1073741824\n");
  write_memory_max("x", "1\n");
  EXPECT_THAT(cgroup::memory_limit(mount_, "/../x"), Optional(kGiB));
}

TEST(ScanHost, MatchesWhatTheKernelReportsHere) {
  const HostInfo host = scan_host();
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  ASSERT_GT(pages, 0);
  ASSERT_GT(page_size, 0);
  EXPECT_EQ(host.total_ram_bytes, static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page_size));
  EXPECT_GT(host.available_ram_bytes, 0u);
  EXPECT_LE(host.available_ram_bytes, host.total_ram_bytes);
  EXPECT_LE(host.limit_bytes(), host.total_ram_bytes);
  if (host.cgroup_limit_bytes) {
    EXPECT_EQ(host.limit_bytes(), std::min(*host.cgroup_limit_bytes, host.total_ram_bytes));
  }
}

}  // namespace
}  // namespace plimsoll
