#include "plimsoll/policy.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "plimsoll/device.hpp"
#include "plimsoll/error.hpp"
#include "policy_builder.hpp"

namespace plimsoll {
namespace {

using ::testing::HasSubstr;

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;

std::string rejection_of(const Policy& policy) {
  try {
    policy.validate();
    ADD_FAILURE() << "the policy was accepted";
  } catch (const InvalidArgument& error) {
    return error.what();
  }
  return {};
}

TEST(Growth, NamesRoundTrip) {
  EXPECT_EQ(to_string(Growth::preallocate), "preallocate");
  EXPECT_EQ(to_string(Growth::on_demand), "on_demand");
  EXPECT_EQ(parse_growth("preallocate"), Growth::preallocate);
  EXPECT_EQ(parse_growth("on_demand"), Growth::on_demand);
}

TEST(Growth, RejectsOtherSpellingsNamingTheAcceptedOnes) {
  for (const char* text : {"", "ondemand", "on-demand", "Preallocate", "grow"}) {
    try {
      parse_growth(text);
      ADD_FAILURE() << '"' << text << "\" was accepted";
    } catch (const InvalidArgument& error) {
      EXPECT_THAT(error.what(), HasSubstr(std::string("invalid growth \"") + text + "\""));
      EXPECT_THAT(error.what(), HasSubstr("\"preallocate\""));
      EXPECT_THAT(error.what(), HasSubstr("\"on_demand\""));
    }
  }
}

TEST(PolicyValidate, AcceptsEveryValidForm) {
  EXPECT_NO_THROW(Policy{}.validate());
  EXPECT_NO_THROW(Policy(PolicyOf().growth(Growth::preallocate).limit(1)).validate());
  EXPECT_NO_THROW(Policy(PolicyOf().fraction(1.0)).validate());
  EXPECT_NO_THROW(Policy(PolicyOf().fraction(1e-9)).validate());
  EXPECT_NO_THROW(Policy(PolicyOf().limit(8 * kGiB).reserve(0).threshold(0)).validate());
  constexpr std::uint64_t kMost = std::numeric_limits<std::uint64_t>::max();
  EXPECT_NO_THROW(Policy(PolicyOf().reserve(kMost).threshold(kMost)).validate());
}

TEST(PolicyValidate, RejectsLimitAndFractionTogether) {
  const std::string message = rejection_of(Policy(PolicyOf().limit(8 * kGiB).fraction(0.5)));
  EXPECT_THAT(message, HasSubstr("set memory_limit or memory_fraction, not both"));
  EXPECT_THAT(message, HasSubstr("8.00 GiB"));
  EXPECT_THAT(message, HasSubstr("0.5"));
  EXPECT_THAT(message, HasSubstr("remove one"));
}

TEST(PolicyValidate, RejectsZeroLimit) {
  const std::string message = rejection_of(Policy(PolicyOf().limit(0)));
  EXPECT_THAT(message, HasSubstr("memory_limit must be more than 0 bytes"));
  EXPECT_THAT(message, HasSubstr("\"8GiB\""));
}

TEST(PolicyValidate, RejectsFractionsOutsideZeroToOne) {
  for (double fraction : {0.0, -0.5, 1.5, 1.0000001, std::nan(""), std::numeric_limits<double>::infinity(),
                          -std::numeric_limits<double>::infinity()}) {
    const std::string message = rejection_of(Policy(PolicyOf().fraction(fraction)));
    EXPECT_THAT(message, HasSubstr("memory_fraction must be a number in (0, 1], got")) << fraction;
    EXPECT_THAT(message, HasSubstr("e.g. 0.9")) << fraction;
  }
  EXPECT_THAT(rejection_of(PolicyOf().fraction(1.5)), HasSubstr("got 1.5"));
  EXPECT_THAT(rejection_of(PolicyOf().fraction(std::nan(""))), HasSubstr("got nan"));
}

TEST(DefaultReserve, CudaKeepsFivePercentWithAFloorAndACap) {
  // 5% of 80 GiB is 4 GiB: above the 512 MiB floor, below the quarter cap.
  EXPECT_EQ(default_reserve(DeviceKind::cuda, 80 * kGiB), 4 * kGiB);
  EXPECT_EQ(default_reserve(DeviceKind::cuda, 40 * kGiB), 2 * kGiB);
  // 5% of 8 GiB is 409.6 MiB: the 512 MiB floor for the context and workspaces wins.
  EXPECT_EQ(default_reserve(DeviceKind::cuda, 8 * kGiB), 512 * kMiB);
  // A quarter of 1 GiB is less than the floor: the cap keeps three quarters usable.
  EXPECT_EQ(default_reserve(DeviceKind::cuda, 1 * kGiB), 256 * kMiB);
  EXPECT_EQ(default_reserve(DeviceKind::cuda, 0), 0u);
}

TEST(DefaultReserve, CpuKeepsATenthUpToOneGiB) {
  EXPECT_EQ(default_reserve(DeviceKind::cpu, 64 * kGiB), 1 * kGiB);
  EXPECT_EQ(default_reserve(DeviceKind::cpu, 10 * kGiB), 1 * kGiB);
  EXPECT_EQ(default_reserve(DeviceKind::cpu, 4 * kGiB), 4 * kGiB / 10);
  EXPECT_EQ(default_reserve(DeviceKind::cpu, 0), 0u);
}

TEST(DefaultReserve, SimulatedDevicesKeepNothing) {
  EXPECT_EQ(default_reserve(DeviceKind::sim, 16 * kGiB), 0u);
  EXPECT_EQ(default_reserve(DeviceKind::sim, 0), 0u);
}

class PolicyFor : public ::testing::Test {
 protected:
  void SetUp() override {
    config.default_policy = Policy(PolicyOf().fraction(0.5));
    config.device_policies["cuda:0"] = Policy(PolicyOf().growth(Growth::preallocate).fraction(0.9));
    config.device_policies["cuda:0/1"] = Policy(PolicyOf().limit(2 * kGiB));
    config.device_policies["sim:16GiB"] = Policy(PolicyOf().limit(1 * kGiB));
  }
  Config config;
};

TEST_F(PolicyFor, ExactNameWins) {
  EXPECT_EQ(config.policy_for(DeviceName::parse("cuda:0/1")), Policy(PolicyOf().limit(2 * kGiB)));
  EXPECT_EQ(config.policy_for(DeviceName::parse("cuda:0")),
            Policy(PolicyOf().growth(Growth::preallocate).fraction(0.9)));
}

TEST_F(PolicyFor, LogicalDeviceFallsBackToItsPhysicalDevice) {
  EXPECT_EQ(config.policy_for(DeviceName::parse("cuda:0/0")),
            Policy(PolicyOf().growth(Growth::preallocate).fraction(0.9)));
  EXPECT_EQ(config.policy_for(DeviceName::parse("sim:16GiB/3")), Policy(PolicyOf().limit(1 * kGiB)));
}

TEST_F(PolicyFor, OtherDevicesGetTheDefault) {
  EXPECT_EQ(config.policy_for(DeviceName::parse("cuda:1")), config.default_policy);
  EXPECT_EQ(config.policy_for(DeviceName::parse("cuda:1/1")), config.default_policy);
  EXPECT_EQ(config.policy_for(DeviceName::parse("cpu")), config.default_policy);
  EXPECT_EQ(config.policy_for(DeviceName::parse("sim:8GiB")), config.default_policy);
}

TEST_F(PolicyFor, APhysicalDeviceDoesNotTakeItsLogicalDevicesEntry) {
  config.device_policies.erase("cuda:0");
  EXPECT_EQ(config.policy_for(DeviceName::parse("cuda:0")), config.default_policy);
}

}  // namespace
}  // namespace plimsoll
