#include <cstdint>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "plimsoll/device.hpp"
#include "plimsoll/error.hpp"

namespace plimsoll {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;
constexpr const char* kAcceptedForms =
    "expected cpu, cpu-pinned, cuda:N or sim:SIZE (e.g. sim:16GiB), optionally /K for logical device K";

std::string rejection_of(const std::string& text) {
  try {
    const DeviceName name = DeviceName::parse(text);
    ADD_FAILURE() << '"' << text << "\" was accepted as " << name.str();
  } catch (const InvalidArgument& error) {
    return error.what();
  }
  return {};
}

DeviceName cuda(int index, int logical = -1) {
  return DeviceName{.kind = DeviceKind::cuda, .index = index, .sim_bytes = 0, .logical = logical};
}

DeviceName sim(std::uint64_t bytes, int logical = -1) {
  return DeviceName{.kind = DeviceKind::sim, .index = 0, .sim_bytes = bytes, .logical = logical};
}

DeviceName cpu(int logical = -1) {
  return DeviceName{.kind = DeviceKind::cpu, .index = 0, .sim_bytes = 0, .logical = logical};
}

TEST(DeviceNameParse, Cpu) {
  const DeviceName name = DeviceName::parse("cpu");
  EXPECT_EQ(name.kind, DeviceKind::cpu);
  EXPECT_EQ(name.logical, -1);
  EXPECT_EQ(name, cpu());
}

TEST(DeviceNameParse, CpuPinned) {
  const DeviceName name = DeviceName::parse("cpu-pinned");
  EXPECT_EQ(name.kind, DeviceKind::cpu);
  EXPECT_TRUE(name.pinned);
  EXPECT_EQ(name.str(), "cpu-pinned");
  EXPECT_NE(name, DeviceName::parse("cpu")) << "pinned and pageable host memory are different devices";
  const DeviceName logical = DeviceName::parse("cpu-pinned/1");
  EXPECT_EQ(logical.logical, 1);
  EXPECT_EQ(logical.physical(), name);
  EXPECT_EQ(logical.str(), "cpu-pinned/1");
  EXPECT_THROW(DeviceName::parse("cpu-pinnedx"), InvalidArgument);
  EXPECT_THROW(DeviceName::parse("cpu-pinned:0"), InvalidArgument);
  try {
    DeviceName::parse("pinned");
    FAIL();
  } catch (const InvalidArgument& error) {
    EXPECT_THAT(error.what(), HasSubstr("cpu-pinned"));
  }
}

TEST(DeviceNameParse, CudaWithIndex) {
  EXPECT_EQ(DeviceName::parse("cuda:0"), cuda(0));
  EXPECT_EQ(DeviceName::parse("cuda:7"), cuda(7));
  EXPECT_EQ(DeviceName::parse("cuda:12"), cuda(12));
  EXPECT_EQ(DeviceName::parse("cuda:01"), cuda(1));
  EXPECT_EQ(DeviceName::parse("cuda:2147483647"), cuda(2147483647));
}

TEST(DeviceNameParse, SimWithAnySize) {
  EXPECT_EQ(DeviceName::parse("sim:16GiB"), sim(16 * kGiB));
  EXPECT_EQ(DeviceName::parse("sim:16 GiB"), sim(16 * kGiB));
  EXPECT_EQ(DeviceName::parse("sim:1.5GiB"), sim(kGiB + kGiB / 2));
  EXPECT_EQ(DeviceName::parse("sim:8gb"), sim(8'000'000'000));
  EXPECT_EQ(DeviceName::parse("sim:1"), sim(1));
}

TEST(DeviceNameParse, LogicalSuffix) {
  EXPECT_EQ(DeviceName::parse("cpu/1"), cpu(1));
  EXPECT_EQ(DeviceName::parse("cuda:0/0"), cuda(0, 0));
  EXPECT_EQ(DeviceName::parse("cuda:3/12"), cuda(3, 12));
  EXPECT_EQ(DeviceName::parse("sim:8GiB/1"), sim(8 * kGiB, 1));
  EXPECT_EQ(DeviceName::parse("sim:8 GiB/1"), sim(8 * kGiB, 1));
}

TEST(DeviceNameParse, PhysicalDropsTheLogicalIndex) {
  EXPECT_EQ(DeviceName::parse("cuda:2/3").physical(), cuda(2));
  EXPECT_EQ(DeviceName::parse("sim:1GiB/0").physical(), DeviceName::parse("sim:1GiB"));
  EXPECT_EQ(DeviceName::parse("cpu").physical(), cpu());
}

TEST(DeviceNameParse, LogicalIndexMakesADifferentDevice) {
  EXPECT_NE(DeviceName::parse("cuda:0"), DeviceName::parse("cuda:0/0"));
  EXPECT_NE(DeviceName::parse("cuda:0/0"), DeviceName::parse("cuda:0/1"));
  EXPECT_NE(DeviceName::parse("sim:1GiB"), DeviceName::parse("sim:2GiB"));
}

TEST(DeviceNameParse, RejectsUnknownForms) {
  for (const char* text : {"", "xyz", "CPU", "Cpu", "cuda", "gpu:0", "gpu", "cuda0", "mps", "sim", " cpu", "cpu ",
                           "cpu:0", "tpu:1"}) {
    EXPECT_EQ(rejection_of(text), std::string("invalid device \"") + text + "\": " + kAcceptedForms) << text;
  }
}

TEST(DeviceNameParse, RejectsBadCudaIndexes) {
  for (const char* text : {"cuda:", "cuda:-1", "cuda:+1", "cuda: 1", "cuda:1 ", "cuda:x", "cuda:1.0", "cuda:0x1",
                           "cuda::0", "cuda:2147483648", "cuda:99999999999999999999"}) {
    const std::string message = rejection_of(text);
    EXPECT_THAT(message, StartsWith(std::string("invalid device \"") + text + "\": ")) << text;
    EXPECT_THAT(message, HasSubstr("cuda:0")) << text;
    EXPECT_THAT(message, HasSubstr(kAcceptedForms)) << text;
  }
}

TEST(DeviceNameParse, RejectsBadSimSizes) {
  EXPECT_THAT(rejection_of("sim:"), HasSubstr("invalid size \"\""));
  EXPECT_THAT(rejection_of("sim:12 parsecs"), HasSubstr("unknown unit \"parsecs\""));
  EXPECT_THAT(rejection_of("sim:1.5"), HasSubstr("fraction"));
  EXPECT_THAT(rejection_of("sim:-1GiB"), HasSubstr("negative"));
  const std::string zero = rejection_of("sim:0");
  EXPECT_THAT(zero, StartsWith("invalid device \"sim:0\": "));
  EXPECT_THAT(zero, HasSubstr("more than 0 bytes"));
  EXPECT_THAT(rejection_of("sim:0GiB"), HasSubstr("more than 0 bytes"));
  EXPECT_THAT(rejection_of("sim:0.0000000001KiB"), HasSubstr("more than 0 bytes"));
}

TEST(DeviceNameParse, RejectsBadLogicalSuffixes) {
  for (const char* text : {"cpu/", "cpu/-1", "cpu/x", "cpu/1/2", "cuda:0/", "cuda:0/+1", "cpu/ 1", "/1",
                           "sim:1GiB/", "cpu/99999999999"}) {
    const std::string message = rejection_of(text);
    EXPECT_THAT(message, StartsWith(std::string("invalid device \"") + text + "\": ")) << text;
    EXPECT_THAT(message, HasSubstr(kAcceptedForms)) << text;
  }
  EXPECT_THAT(rejection_of("cpu/x"), HasSubstr("logical device"));
}

TEST(DeviceNameStr, EachKind) {
  EXPECT_EQ(cpu().str(), "cpu");
  EXPECT_EQ(cuda(0).str(), "cuda:0");
  EXPECT_EQ(cuda(13).str(), "cuda:13");
  EXPECT_EQ(sim(16 * kGiB).str(), "sim:16GiB");
  EXPECT_EQ(cpu(2).str(), "cpu/2");
  EXPECT_EQ(cuda(1, 0).str(), "cuda:1/0");
  EXPECT_EQ(sim(8 * kGiB, 1).str(), "sim:8GiB/1");
}

TEST(DeviceNameStr, SimUsesTheLargestExactBinaryUnit) {
  EXPECT_EQ(sim(1).str(), "sim:1");
  EXPECT_EQ(sim(1000).str(), "sim:1000");
  EXPECT_EQ(sim(1024).str(), "sim:1KiB");
  EXPECT_EQ(sim(1536).str(), "sim:1536");  // 1.5 KiB is not a whole number of KiB
  EXPECT_EQ(sim(std::uint64_t{3} << 20).str(), "sim:3MiB");
  EXPECT_EQ(sim(kGiB + kGiB / 2).str(), "sim:1536MiB");
  EXPECT_EQ(sim(8'000'000'000).str(), "sim:7812500KiB");
  EXPECT_EQ(sim(kGiB << 10).str(), "sim:1TiB");
  EXPECT_EQ(sim(kGiB << 20).str(), "sim:1024TiB");  // no unit past TiB
  EXPECT_EQ(sim(kGiB << 30).str(), "sim:1048576TiB");
}

TEST(DeviceNameRoundTrip, ParseOfStrGivesTheSameName) {
  const std::vector<DeviceName> names = {
      cpu(), cpu(0), cpu(5), cuda(0), cuda(3, 2), cuda(2147483647, 2147483647), sim(1), sim(1536),
      sim(16 * kGiB), sim(8'000'000'000, 4), sim(~std::uint64_t{0}), sim(~std::uint64_t{0} << 40)};
  for (const DeviceName& name : names) {
    EXPECT_EQ(DeviceName::parse(name.str()), name) << name.str();
  }
}

TEST(DeviceNameRoundTrip, CanonicalTextsComeBackUnchanged) {
  for (const char* text : {"cpu", "cpu/0", "cuda:0", "cuda:15/3", "sim:16GiB", "sim:1536MiB/2", "sim:12345"}) {
    EXPECT_EQ(DeviceName::parse(text).str(), text);
  }
}

}  // namespace
}  // namespace plimsoll
