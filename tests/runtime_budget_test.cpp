// The budget rules: which limit a device gets from its policy and hardware, and which configs are refused.
#include <cstdint>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "plimsoll/error.hpp"
#include "plimsoll/policy.hpp"
#include "runtime/budget.hpp"

namespace {

using plimsoll::DeviceKind;
using plimsoll::InvalidArgument;
using plimsoll::Policy;
using plimsoll::runtime::Budget;
using plimsoll::LogicalDeviceConfig;
using plimsoll::runtime::compute_budget;
using plimsoll::runtime::logical_limits;
using plimsoll::runtime::PhysicalMemory;
using testing::AllOf;
using testing::HasSubstr;

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;
using Limits = std::vector<std::uint64_t>;

PhysicalMemory gpu(std::uint64_t total, std::uint64_t free_bytes) {
  return {DeviceKind::cuda, total, free_bytes, total, 0};
}

PhysicalMemory gpu_of_compute(std::uint64_t total, int compute_major) {
  return {DeviceKind::cuda, total, total, total, compute_major};
}

Policy with_reserve(std::uint64_t reserve) {
  Policy policy;
  policy.reserve = reserve;
  return policy;
}

std::string message_of(const PhysicalMemory& memory, const Policy& policy, const std::string& device = "cuda:0") {
  try {
    compute_budget(device, memory, policy);
  } catch (const InvalidArgument& error) {
    return error.what();
  }
  return "no error";
}

TEST(RuntimeBudget, MemoryLimitWinsWhenItFits) {
  Policy policy = with_reserve(512 * kMiB);
  policy.memory_limit = 10 * kGiB;
  const Budget budget = compute_budget("cuda:0", gpu(16 * kGiB, 4 * kGiB), policy);
  // Not capped by what is free now: another process may let go; the OOM report explains it if not.
  EXPECT_EQ(budget.limit_bytes, 10 * kGiB);
  EXPECT_EQ(budget.reserve_bytes, 512 * kMiB);
  EXPECT_EQ(budget.capacity_bytes, 16 * kGiB - 512 * kMiB);
  EXPECT_EQ(budget.policy.reserve, 512 * kMiB);
}

TEST(RuntimeBudget, MemoryLimitAboveTotalMinusReserveIsRefusedWithBothNumbers) {
  Policy policy = with_reserve(512 * kMiB);
  policy.memory_limit = 20 * kGiB;
  const std::string message = message_of(gpu(16 * kGiB, 16 * kGiB), policy);
  EXPECT_THAT(message, AllOf(HasSubstr("memory_limit 20.00 GiB for cuda:0 exceeds what the device can give"),
                             HasSubstr("16.00 GiB total - 512.00 MiB reserve = 15.50 GiB"), HasSubstr("lower it")));
}

TEST(RuntimeBudget, LimitExactlyTotalMinusReserveIsAccepted) {
  Policy policy = with_reserve(kGiB);
  policy.memory_limit = 15 * kGiB;
  EXPECT_EQ(compute_budget("cuda:0", gpu(16 * kGiB, kGiB), policy).limit_bytes, 15 * kGiB);
  policy.memory_limit = 15 * kGiB + 1;
  EXPECT_THROW(compute_budget("cuda:0", gpu(16 * kGiB, kGiB), policy), InvalidArgument);
}

TEST(RuntimeBudget, FractionIsOfTheTotal) {
  Policy policy = with_reserve(kGiB);
  policy.memory_fraction = 0.5;
  EXPECT_EQ(compute_budget("cuda:0", gpu(16 * kGiB, 2 * kGiB), policy).limit_bytes, 8 * kGiB);
}

TEST(RuntimeBudget, FractionThatEatsTheReserveIsRefused) {
  Policy policy = with_reserve(kGiB);
  policy.memory_fraction = 1.0;
  EXPECT_THAT(message_of(gpu(16 * kGiB, 16 * kGiB), policy),
              AllOf(HasSubstr("memory_fraction 1"), HasSubstr("exceeds what the device can give"),
                    HasSubstr("lower the fraction or the reserve")));
}

TEST(RuntimeBudget, GpuDefaultIsFreeMinusReserve) {
  // Another process holds 6 GiB: the default takes only what is free now, less the reserve.
  EXPECT_EQ(compute_budget("cuda:0", gpu(16 * kGiB, 10 * kGiB), with_reserve(kGiB)).limit_bytes, 9 * kGiB);
}

TEST(RuntimeBudget, GpuDefaultWithLessFreeThanTheReserveIsZeroNotAWrapAround) {
  EXPECT_EQ(compute_budget("cuda:0", gpu(16 * kGiB, 256 * kMiB), with_reserve(kGiB)).limit_bytes, 0u);
}

TEST(RuntimeBudget, SimDefaultIsTotalMinusReserve) {
  const PhysicalMemory sim{DeviceKind::sim, 8 * kGiB, 8 * kGiB, 8 * kGiB, 0};
  EXPECT_EQ(compute_budget("sim:8GiB", sim, with_reserve(kGiB)).limit_bytes, 7 * kGiB);
}

TEST(RuntimeBudget, HostDefaultIsTheCeilingMinusReserveNotAvailableMemory) {
  // 64 GiB of RAM, 3 GiB available right now, an 8 GiB cgroup limit: the cgroup is the ceiling.
  const PhysicalMemory host{DeviceKind::cpu, 64 * kGiB, 3 * kGiB, 8 * kGiB, 0};
  const Budget budget = compute_budget("cpu", host, with_reserve(kGiB));
  EXPECT_EQ(budget.limit_bytes, 7 * kGiB);
  Policy too_much = with_reserve(kGiB);
  too_much.memory_limit = 16 * kGiB;
  EXPECT_THAT(message_of(host, too_much, "cpu"), HasSubstr("8.00 GiB host limit - 1.00 GiB reserve = 7.00 GiB"));
}

TEST(RuntimeBudget, DefaultReserveComesFromThePolicyLayer) {
  const PhysicalMemory sim{DeviceKind::sim, 8 * kGiB, 8 * kGiB, 8 * kGiB, 0};
  const Budget budget = compute_budget("sim:8GiB", sim, Policy{});
  const std::uint64_t expected_reserve = plimsoll::default_reserve(DeviceKind::sim, 8 * kGiB);
  EXPECT_EQ(budget.reserve_bytes, expected_reserve);
  EXPECT_EQ(budget.policy.reserve, expected_reserve);
  EXPECT_EQ(budget.limit_bytes, 8 * kGiB - expected_reserve);
}

TEST(RuntimeBudget, ReserveAsLargeAsTheDeviceIsRefused) {
  const PhysicalMemory sim{DeviceKind::sim, kGiB, kGiB, kGiB, 0};
  EXPECT_THAT(message_of(sim, with_reserve(2 * kGiB), "sim:1GiB"),
              AllOf(HasSubstr("reserve 2.00 GiB for sim:1GiB leaves nothing"), HasSubstr("lower reserve")));
}

TEST(RuntimeBudget, InvalidPolicyIsRefusedBeforeAnyArithmetic) {
  Policy policy;
  policy.memory_limit = kGiB;
  policy.memory_fraction = 0.5;  // both: Policy::validate refuses the combination
  EXPECT_THROW(compute_budget("cuda:0", gpu(16 * kGiB, 16 * kGiB), policy), InvalidArgument);
}

TEST(RuntimeBudget, LogicalSplitMustFitInTotalMinusReserve) {
  const PhysicalMemory sim{DeviceKind::sim, 8 * kGiB, 8 * kGiB, 8 * kGiB, 0};
  const Budget physical = compute_budget("sim:8GiB", sim, with_reserve(0));
  EXPECT_EQ(logical_limits("sim:8GiB", sim, physical, {{3 * kGiB}, {3 * kGiB}}), (Limits{3 * kGiB, 3 * kGiB}));
  EXPECT_NO_THROW(logical_limits("sim:8GiB", sim, physical, {{4 * kGiB}, {4 * kGiB}}));
  try {
    logical_limits("sim:8GiB", sim, physical, {{5 * kGiB}, {5 * kGiB}});
    FAIL() << "a 10 GiB split of an 8 GiB device was accepted";
  } catch (const InvalidArgument& error) {
    EXPECT_THAT(error.what(), AllOf(HasSubstr("10.00 GiB in total (5.00 GiB + 5.00 GiB)"),
                                    HasSubstr("8.00 GiB total - 0 B reserve = 8.00 GiB"),
                                    HasSubstr("sum to at most 8.00 GiB")));
  }
}

TEST(RuntimeBudget, LogicalSplitRefusesEmptyListsAndZeroSizes) {
  const PhysicalMemory sim{DeviceKind::sim, 8 * kGiB, 8 * kGiB, 8 * kGiB, 0};
  const Budget physical = compute_budget("sim:8GiB", sim, with_reserve(0));
  EXPECT_THROW(logical_limits("sim:8GiB", sim, physical, {}), InvalidArgument);
  EXPECT_THROW(logical_limits("sim:8GiB", sim, physical, {{kGiB}, {0}}), InvalidArgument);
}

TEST(RuntimeBudget, EqualSharesDivideThePhysicalLimit) {
  const PhysicalMemory sim{DeviceKind::sim, 8 * kGiB, 8 * kGiB, 8 * kGiB, 0};
  const Budget physical = compute_budget("sim:8GiB", sim, with_reserve(0));
  const auto equal = LogicalDeviceConfig::equal();
  EXPECT_EQ(logical_limits("sim:8GiB", sim, physical, {equal, equal}), (Limits{4 * kGiB, 4 * kGiB}));
  // A share is rounded down to whole MiB: 8 GiB / 3 is 2730.67 MiB.
  EXPECT_EQ(logical_limits("sim:8GiB", sim, physical, {equal, equal, equal}), (Limits(3, 2730 * kMiB)));
}

TEST(RuntimeBudget, EqualSharesSplitWhatTheSizedSiblingsLeave) {
  const PhysicalMemory sim{DeviceKind::sim, 8 * kGiB, 8 * kGiB, 8 * kGiB, 0};
  const Budget physical = compute_budget("sim:8GiB", sim, with_reserve(0));
  const auto equal = LogicalDeviceConfig::equal();
  EXPECT_EQ(logical_limits("sim:8GiB", sim, physical, {equal, LogicalDeviceConfig::sized(2 * kGiB), equal}),
            (Limits{3 * kGiB, 2 * kGiB, 3 * kGiB}));
}

TEST(RuntimeBudget, EqualSharesFollowThePhysicalPolicyNotTheCapacity) {
  const PhysicalMemory sim{DeviceKind::sim, 8 * kGiB, 8 * kGiB, 8 * kGiB, 0};
  Policy half = with_reserve(0);
  half.memory_fraction = 0.5;
  const Budget physical = compute_budget("sim:8GiB", sim, half);
  const auto equal = LogicalDeviceConfig::equal();
  EXPECT_EQ(logical_limits("sim:8GiB", sim, physical, {equal, equal}), (Limits{2 * kGiB, 2 * kGiB}));
}

TEST(RuntimeBudget, EqualSharesThatComeToNothingAreRefused) {
  const PhysicalMemory sim{DeviceKind::sim, 8 * kGiB, 8 * kGiB, 8 * kGiB, 0};
  const Budget physical = compute_budget("sim:8GiB", sim, with_reserve(0));
  try {
    logical_limits("sim:8GiB", sim, physical, {LogicalDeviceConfig::sized(8 * kGiB), LogicalDeviceConfig::equal()});
    FAIL() << "an equal share of nothing was accepted";
  } catch (const InvalidArgument& error) {
    EXPECT_THAT(error.what(), AllOf(HasSubstr("1 equal-share logical devices of sim:8GiB get nothing"),
                                    HasSubstr("leaves 0 B after the sized ones"),
                                    HasSubstr("lower the sized logical devices")));
  }
}

// TensorFlow's floors by compute capability, at least 5% of the total, at most a quarter of it.
TEST(RuntimeBudget, GpuDefaultReserveFollowsComputeCapability) {
  using plimsoll::runtime::default_reserve_for;
  EXPECT_EQ(default_reserve_for(gpu_of_compute(8 * kGiB, 6)), 500 * kMiB);
  EXPECT_EQ(default_reserve_for(gpu_of_compute(8 * kGiB, 7)), 1050 * kMiB);
  EXPECT_EQ(default_reserve_for(gpu_of_compute(8 * kGiB, 8)), 1536 * kMiB);
  EXPECT_EQ(default_reserve_for(gpu_of_compute(80 * kGiB, 9)), 4 * kGiB);  // 5% passes the floor
  EXPECT_EQ(default_reserve_for(gpu_of_compute(4 * kGiB, 9)), kGiB);       // a quarter caps it
  EXPECT_EQ(default_reserve_for(gpu_of_compute(1536 * kMiB, 9)), 225 * kMiB);  // below 2 GiB
  // Capability unknown (0): the kind's default.
  EXPECT_EQ(default_reserve_for(gpu(8 * kGiB, 8 * kGiB)), plimsoll::default_reserve(DeviceKind::cuda, 8 * kGiB));
}

TEST(RuntimeBudget, GpuWithoutLimitTakesFreeMinusTheCapabilityReserve) {
  PhysicalMemory memory = gpu_of_compute(16 * kGiB, 8);
  memory.free_bytes = 10 * kGiB;
  const Budget budget = compute_budget("cuda:0", memory, Policy{});
  EXPECT_EQ(budget.reserve_bytes, 1536 * kMiB);
  EXPECT_EQ(budget.limit_bytes, 10 * kGiB - 1536 * kMiB);
  // A fraction applies to the total, whatever is free.
  Policy fraction;
  fraction.memory_fraction = 0.5;
  EXPECT_EQ(compute_budget("cuda:0", memory, fraction).limit_bytes, 8 * kGiB);
}

}  // namespace
