#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "plimsoll/error.hpp"
#include "plimsoll/policy.hpp"
#include "policy_builder.hpp"

namespace plimsoll {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;

// Getenv is a plain function pointer, so the fake environment lives in one place the function can see.
std::map<std::string, std::string>& fake_environment() {
  static std::map<std::string, std::string> variables;
  return variables;
}

const char* fake_getenv(const char* name) {
  const auto found = fake_environment().find(name);
  return found == fake_environment().end() ? nullptr : found->second.c_str();
}

class Environment : public ::testing::Test {
 protected:
  void SetUp() override { fake_environment().clear(); }
  void TearDown() override {
    fake_environment().clear();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  static void set(const std::string& name, const std::string& value) { fake_environment()[name] = value; }

  static Config apply(Config base = {}) { return apply_environment(std::move(base), &fake_getenv); }

  static std::string rejection(Config base = {}) {
    try {
      apply(std::move(base));
      ADD_FAILURE() << "the environment was accepted";
    } catch (const InvalidArgument& error) {
      return error.what();
    }
    return {};
  }

  std::string write_config(const std::string& text) {
    dir_ = std::filesystem::temp_directory_path() /
           ("plimsoll_policy_environment_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    const std::filesystem::path path = dir_ / "plimsoll.json";
    std::ofstream(path) << text;
    return path.string();
  }

  static Config sample_base() {
    Config base;
    base.default_policy = Policy(PolicyOf().growth(Growth::preallocate).fraction(0.5).reserve(1 * kGiB));
    base.device_policies["cuda:0"] = Policy(PolicyOf().limit(4 * kGiB));
    base.cpu_fallback = true;
    base.visible_devices = "1";
    base.log_device_creation = false;
    return base;
  }

  std::filesystem::path dir_;
};

TEST_F(Environment, NothingSetChangesNothing) {
  const Config base = sample_base();
  const Config result = apply(base);
  EXPECT_EQ(result.default_policy, base.default_policy);
  EXPECT_EQ(result.device_policies, base.device_policies);
  EXPECT_EQ(result.cpu_fallback, base.cpu_fallback);
  EXPECT_EQ(result.visible_devices, base.visible_devices);
  EXPECT_EQ(result.log_device_creation, base.log_device_creation);
}

TEST_F(Environment, EmptyVariablesCountAsUnset) {
  for (const char* name : {"PLIMSOLL_ALLOW_GROWTH", "PLIMSOLL_GROWTH", "PLIMSOLL_MEMORY_LIMIT",
                           "PLIMSOLL_MEMORY_FRACTION", "PLIMSOLL_RESERVE", "PLIMSOLL_RELEASE_THRESHOLD",
                           "PLIMSOLL_CPU_FALLBACK", "PLIMSOLL_VISIBLE_DEVICES", "PLIMSOLL_CONFIG", "PLIMSOLL_LOG"}) {
    set(name, "");
  }
  const Config base = sample_base();
  const Config result = apply(base);
  EXPECT_EQ(result.default_policy, base.default_policy);
  EXPECT_EQ(result.visible_devices, "1");
  EXPECT_TRUE(result.cpu_fallback);
}

TEST_F(Environment, AllowGrowthFollowsTensorFlowsMeaning) {
  set("PLIMSOLL_ALLOW_GROWTH", "true");
  EXPECT_EQ(apply(sample_base()).default_policy.growth, Growth::on_demand);
  set("PLIMSOLL_ALLOW_GROWTH", "false");
  EXPECT_EQ(apply(Config{}).default_policy.growth, Growth::preallocate);
}

TEST_F(Environment, BooleansAcceptEveryDocumentedSpelling) {
  for (const char* yes : {"true", "TRUE", "True", "1", "yes", "YES"}) {
    set("PLIMSOLL_CPU_FALLBACK", yes);
    set("PLIMSOLL_LOG", yes);
    const Config result = apply(sample_base());
    EXPECT_TRUE(result.cpu_fallback) << yes;
    EXPECT_TRUE(result.log_device_creation) << yes;
  }
  for (const char* no : {"false", "False", "0", "no", "No"}) {
    set("PLIMSOLL_CPU_FALLBACK", no);
    set("PLIMSOLL_LOG", no);
    Config base;
    base.cpu_fallback = true;
    const Config result = apply(base);
    EXPECT_FALSE(result.cpu_fallback) << no;
    EXPECT_FALSE(result.log_device_creation) << no;
  }
}

TEST_F(Environment, BadBooleansNameTheVariableAndTheAcceptedValues) {
  for (const char* name : {"PLIMSOLL_ALLOW_GROWTH", "PLIMSOLL_CPU_FALLBACK", "PLIMSOLL_LOG"}) {
    SetUp();
    set(name, "maybe");
    EXPECT_EQ(rejection(), std::string("environment variable ") + name +
                               "=\"maybe\": expected true, false, 1, 0, yes or no (case-insensitive)");
  }
  SetUp();
  set("PLIMSOLL_LOG", "2");
  EXPECT_THAT(rejection(), HasSubstr("PLIMSOLL_LOG=\"2\""));
}

TEST_F(Environment, GrowthByName) {
  set("PLIMSOLL_GROWTH", "preallocate");
  EXPECT_EQ(apply().default_policy.growth, Growth::preallocate);
  set("PLIMSOLL_GROWTH", "on_demand");
  EXPECT_EQ(apply(sample_base()).default_policy.growth, Growth::on_demand);
  set("PLIMSOLL_GROWTH", "grow");
  EXPECT_THAT(rejection(), StartsWith("environment variable PLIMSOLL_GROWTH=\"grow\": invalid growth \"grow\""));
}

TEST_F(Environment, GrowthVariablesMustAgree) {
  set("PLIMSOLL_GROWTH", "on_demand");
  set("PLIMSOLL_ALLOW_GROWTH", "yes");
  EXPECT_EQ(apply(sample_base()).default_policy.growth, Growth::on_demand);
  set("PLIMSOLL_ALLOW_GROWTH", "false");
  const std::string message = rejection();
  EXPECT_THAT(message,
              HasSubstr("PLIMSOLL_ALLOW_GROWTH=\"false\" asks for preallocate but PLIMSOLL_GROWTH=\"on_demand\""));
  EXPECT_THAT(message, HasSubstr("set only one of them"));
}

TEST_F(Environment, LimitReplacesTheConfigsFraction) {
  set("PLIMSOLL_MEMORY_LIMIT", "6GiB");
  const Config result = apply(sample_base());
  EXPECT_EQ(result.default_policy.memory_limit, 6 * kGiB);
  EXPECT_FALSE(result.default_policy.memory_fraction.has_value());
  // Devices with their own entries keep them: the environment sets the default policy.
  EXPECT_EQ(result.device_policies.at("cuda:0"), Policy(PolicyOf().limit(4 * kGiB)));
}

TEST_F(Environment, FractionReplacesTheConfigsLimit) {
  Config base;
  base.default_policy.memory_limit = 3 * kGiB;
  set("PLIMSOLL_MEMORY_FRACTION", "0.75");
  const Config result = apply(base);
  EXPECT_EQ(result.default_policy.memory_fraction, 0.75);
  EXPECT_FALSE(result.default_policy.memory_limit.has_value());
  set("PLIMSOLL_MEMORY_FRACTION", "1");
  EXPECT_EQ(apply().default_policy.memory_fraction, 1.0);
}

TEST_F(Environment, LimitAndFractionTogetherAreRefused) {
  set("PLIMSOLL_MEMORY_LIMIT", "6GiB");
  set("PLIMSOLL_MEMORY_FRACTION", "0.5");
  const std::string message = rejection();
  EXPECT_THAT(message, HasSubstr("PLIMSOLL_MEMORY_LIMIT=\"6GiB\" and PLIMSOLL_MEMORY_FRACTION=\"0.5\" are both set"));
  EXPECT_THAT(message, HasSubstr("set memory_limit or memory_fraction, not both"));
}

TEST_F(Environment, BadLimitsAreRefused) {
  set("PLIMSOLL_MEMORY_LIMIT", "0");
  EXPECT_THAT(rejection(), StartsWith("environment variable PLIMSOLL_MEMORY_LIMIT=\"0\": memory_limit must be more "
                                      "than 0 bytes"));
  set("PLIMSOLL_MEMORY_LIMIT", "6 gigs");
  const std::string message = rejection();
  EXPECT_THAT(message, StartsWith("environment variable PLIMSOLL_MEMORY_LIMIT=\"6 gigs\": invalid size \"6 gigs\""));
  EXPECT_THAT(message, HasSubstr("16GiB"));
}

TEST_F(Environment, BadFractionsAreRefused) {
  for (const char* bad : {"0", "1.5", "-0.5", "nan", "inf", "0.5x", " 0.5", "half", "50%"}) {
    set("PLIMSOLL_MEMORY_FRACTION", bad);
    EXPECT_EQ(rejection(), std::string("environment variable PLIMSOLL_MEMORY_FRACTION=\"") + bad +
                               "\": must be a number in (0, 1], the share of the device's total memory, e.g. 0.9");
  }
}

TEST_F(Environment, ReserveAndReleaseThreshold) {
  set("PLIMSOLL_RESERVE", "0");
  set("PLIMSOLL_RELEASE_THRESHOLD", "256MiB");
  const Config result = apply(sample_base());
  EXPECT_EQ(result.default_policy.reserve, 0u);
  EXPECT_EQ(result.default_policy.release_threshold, 256 * kMiB);
  EXPECT_FALSE(result.default_policy.thread_cache.has_value());
  set("PLIMSOLL_THREAD_CACHE", "1MiB");
  EXPECT_EQ(apply(sample_base()).default_policy.thread_cache, 1 * kMiB);
  EXPECT_EQ(result.default_policy.memory_fraction, 0.5);  // untouched
  set("PLIMSOLL_RESERVE", "-1");
  EXPECT_THAT(rejection(), StartsWith("environment variable PLIMSOLL_RESERVE=\"-1\": invalid size"));
}

TEST_F(Environment, RunPlanSetsTheDefaultPolicysPlan) {
  EXPECT_FALSE(apply(sample_base()).default_policy.run_plan.has_value());
  set("PLIMSOLL_RUN_PLAN", "/jobs/resnet.plan");
  EXPECT_EQ(apply(sample_base()).default_policy.run_plan, "/jobs/resnet.plan");
}

TEST_F(Environment, VisibleDevicesIsPassedOn) {
  set("PLIMSOLL_VISIBLE_DEVICES", "GPU-8932f937,0");
  EXPECT_EQ(apply(sample_base()).visible_devices, "GPU-8932f937,0");
}

TEST_F(Environment, ConfigFileReplacesTheBaseThenVariablesOverrideIt) {
  const std::string path = write_config(R"({"policy": {"memory_fraction": 0.8, "reserve": "2GiB"},
    "devices": {"cuda:1": {"growth": "preallocate"}}, "visible_devices": "0"})");
  set("PLIMSOLL_CONFIG", path);
  const Config from_file = apply(sample_base());
  EXPECT_EQ(from_file.default_policy, Policy(PolicyOf().fraction(0.8).reserve(2 * kGiB)));
  EXPECT_EQ(from_file.device_policies.count("cuda:0"), 0u);  // the base is replaced, not merged
  EXPECT_EQ(from_file.device_policies.count("cuda:1"), 1u);
  EXPECT_FALSE(from_file.cpu_fallback);
  EXPECT_EQ(from_file.visible_devices, "0");

  set("PLIMSOLL_RESERVE", "1GiB");
  set("PLIMSOLL_VISIBLE_DEVICES", "1");
  const Config overridden = apply(sample_base());
  EXPECT_EQ(overridden.default_policy, Policy(PolicyOf().fraction(0.8).reserve(1 * kGiB)));
  EXPECT_EQ(overridden.visible_devices, "1");
}

TEST_F(Environment, UnreadableConfigFileIsAnError) {
  set("PLIMSOLL_CONFIG", "/nonexistent/plimsoll.json");
  EXPECT_THAT(rejection(), StartsWith("cannot read config file /nonexistent/plimsoll.json: No such file or directory"));
}

TEST_F(Environment, ConfigFileErrorsNameTheFile) {
  const std::string path = write_config(R"({"policy": {"growth": "sometimes"}})");
  set("PLIMSOLL_CONFIG", path);
  EXPECT_THAT(rejection(), StartsWith("config " + path + ": \"policy\".\"growth\": invalid growth \"sometimes\""));
}

}  // namespace
}  // namespace plimsoll
