#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "plimsoll/error.hpp"
#include "plimsoll/policy.hpp"
#include "policy_builder.hpp"

namespace plimsoll {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;

std::string rejection_of(const std::string& text) {
  try {
    parse_config_json(text, "test.json");
    ADD_FAILURE() << "accepted: " << text;
  } catch (const InvalidArgument& error) {
    return error.what();
  }
  return {};
}

std::vector<std::uint64_t> limits_of(const std::vector<LogicalDeviceConfig>& split) {
  std::vector<std::uint64_t> limits;
  for (const LogicalDeviceConfig& logical : split) limits.push_back(logical.memory_limit);
  return limits;
}

TEST(ConfigJson, EmptyObjectGivesTheDefaults) {
  const Config config = parse_config_json("{}");
  EXPECT_EQ(config.default_policy, Policy{});
  EXPECT_TRUE(config.device_policies.empty());
  EXPECT_TRUE(config.logical_devices.empty());
  EXPECT_FALSE(config.cpu_fallback);
  EXPECT_FALSE(config.visible_devices.has_value());
  EXPECT_TRUE(config.log_device_creation);
}

TEST(ConfigJson, ReadsTheDocumentedExample) {
  const Config config = parse_config_json(R"({
    "policy": {"growth": "on_demand", "memory_limit": "8GiB", "reserve": "512MiB", "release_threshold": "1GiB"},
    "devices": {"cuda:0": {"growth": "preallocate", "memory_fraction": 0.9, "logical_devices": ["4GiB", "4GiB"]}},
    "cpu_fallback": true, "visible_devices": "0,1", "log_device_creation": false})");
  EXPECT_EQ(config.default_policy,
            Policy(PolicyOf().growth(Growth::on_demand).limit(8 * kGiB).reserve(512 * kMiB).threshold(1 * kGiB)));
  // The device's fraction replaces the inherited limit; reserve and threshold come from "policy".
  ASSERT_EQ(config.device_policies.count("cuda:0"), 1u);
  EXPECT_EQ(config.device_policies.at("cuda:0"),
            Policy(PolicyOf().growth(Growth::preallocate).fraction(0.9).reserve(512 * kMiB).threshold(1 * kGiB)));
  ASSERT_EQ(config.logical_devices.count("cuda:0"), 1u);
  EXPECT_EQ(limits_of(config.logical_devices.at("cuda:0")), (std::vector<std::uint64_t>{4 * kGiB, 4 * kGiB}));
  EXPECT_TRUE(config.cpu_fallback);
  EXPECT_EQ(config.visible_devices, "0,1");
  EXPECT_FALSE(config.log_device_creation);
}

TEST(ConfigJson, SizesMayBeNumbersOrStrings) {
  const Config config =
      parse_config_json(R"({"policy": {"memory_limit": 1073741824, "reserve": 0, "release_threshold": "1.5 GB"}})");
  EXPECT_EQ(config.default_policy.memory_limit, 1 * kGiB);
  EXPECT_EQ(config.default_policy.reserve, 0u);
  EXPECT_EQ(config.default_policy.release_threshold, 1'500'000'000u);
  EXPECT_EQ(parse_config_json(R"({"policy": {"thread_cache": "1MiB"}, "devices": {"cpu/1": {"thread_cache": 0}}})")
                .device_policies.at("cpu/1")
                .thread_cache,
            0u);
  EXPECT_EQ(parse_config_json(R"({"policy": {"thread_cache": "1MiB"}})").default_policy.thread_cache, 1 * kMiB);
}

TEST(ConfigJson, WholeNumbersInExponentFormAreSizesToo) {
  EXPECT_EQ(parse_config_json(R"({"policy": {"memory_limit": 1e9}})").default_policy.memory_limit, 1'000'000'000u);
  EXPECT_EQ(parse_config_json(R"({"policy": {"reserve": 0.0}})").default_policy.reserve, 0u);
}

TEST(ConfigJson, FractionMayBeOneOrAnInteger) {
  EXPECT_EQ(parse_config_json(R"({"policy": {"memory_fraction": 1}})").default_policy.memory_fraction, 1.0);
  EXPECT_EQ(parse_config_json(R"({"policy": {"memory_fraction": 0.25}})").default_policy.memory_fraction, 0.25);
}

TEST(ConfigJson, CommentsAreAllowed) {
  const Config config = parse_config_json(R"({
    // the shared box: leave room for the other team
    "policy": {"memory_fraction": 0.5 /* of the total */}
  })");
  EXPECT_EQ(config.default_policy.memory_fraction, 0.5);
}

TEST(ConfigJson, DevicesInheritTheDocumentPolicyWhateverTheKeyOrder) {
  const Config config = parse_config_json(
      R"({"devices": {"cuda:1": {"reserve": "1GiB"}}, "policy": {"growth": "preallocate", "memory_fraction": 0.5}})");
  EXPECT_EQ(config.device_policies.at("cuda:1"),
            Policy(PolicyOf().growth(Growth::preallocate).fraction(0.5).reserve(1 * kGiB)));
}

TEST(ConfigJson, ADeviceLimitReplacesAnInheritedFraction) {
  const Config config =
      parse_config_json(R"({"policy": {"memory_fraction": 0.5}, "devices": {"cpu": {"memory_limit": "2GiB"}}})");
  EXPECT_EQ(config.device_policies.at("cpu"), Policy(PolicyOf().limit(2 * kGiB)));
  EXPECT_EQ(config.default_policy, Policy(PolicyOf().fraction(0.5)));
}

TEST(ConfigJson, ALogicalDeviceEntryStartsFromItsPhysicalDevicesEntry) {
  // The logical entry comes first in the file; it still builds on cuda:0's entry, and that on "policy".
  const Config config = parse_config_json(R"({
    "devices": {"cuda:0/1": {"release_threshold": 0}, "cuda:0": {"growth": "preallocate"}, "cuda:1/0": {"reserve": 5}},
    "policy": {"reserve": "1GiB"}})");
  EXPECT_EQ(config.device_policies.at("cuda:0/1"),
            Policy(PolicyOf().growth(Growth::preallocate).reserve(1 * kGiB).threshold(0)));
  EXPECT_EQ(config.device_policies.at("cuda:0"), Policy(PolicyOf().growth(Growth::preallocate).reserve(1 * kGiB)));
  // No entry for cuda:1: its logical device starts from "policy".
  EXPECT_EQ(config.device_policies.at("cuda:1/0"), Policy(PolicyOf().reserve(5)));
}

TEST(ConfigJson, ADeviceWithOnlyASplitKeepsFollowingTheDefault) {
  const Config config = parse_config_json(R"({"devices": {"cpu": {"logical_devices": [1048576, "2MiB"]}}})");
  EXPECT_TRUE(config.device_policies.empty());
  EXPECT_EQ(limits_of(config.logical_devices.at("cpu")), (std::vector<std::uint64_t>{1 * kMiB, 2 * kMiB}));
}

TEST(ConfigJson, LogicalDevicesMayTakeEqualShares) {
  const Config listed = parse_config_json(R"({"devices": {"cpu": {"logical_devices": ["equal", "2MiB"]}}})");
  EXPECT_EQ(listed.logical_devices.at("cpu"),
            (std::vector<LogicalDeviceConfig>{LogicalDeviceConfig::equal(), LogicalDeviceConfig::sized(2 * kMiB)}));
  const Config counted = parse_config_json(R"({"devices": {"cuda:0": {"logical_devices": 3}}})");
  EXPECT_EQ(counted.logical_devices.at("cuda:0"), std::vector<LogicalDeviceConfig>(3, LogicalDeviceConfig::equal()));
}

TEST(ConfigJson, RejectsACountOfLogicalDevicesThatIsNoCount) {
  const auto message = [](const std::string& split) {
    try {
      parse_config_json(R"({"devices": {"cpu": {"logical_devices": )" + split + "}}}", "plimsoll.json");
    } catch (const InvalidArgument& error) {
      return std::string(error.what());
    }
    return std::string("accepted");
  };
  EXPECT_THAT(message("0"), AllOf(HasSubstr("\"devices\".\"cpu\".\"logical_devices\""), HasSubstr("at least 1, got 0")));
  EXPECT_THAT(message("-2"), HasSubstr("at least 1, got -2"));
  EXPECT_THAT(message("100000"), HasSubstr("more than the 1024 allowed"));
  EXPECT_THAT(message("2.5"), HasSubstr("or a count of equal shares such as 2, got 2.5"));
  EXPECT_THAT(message(R"(["equals"])"),
              AllOf(HasSubstr("invalid size \"equals\""), HasSubstr("or \"equal\" for an equal share")));
}

TEST(ConfigJson, DeviceKeysAreStoredInCanonicalForm) {
  const Config config = parse_config_json(
      R"({"devices": {"sim:17179869184": {"memory_limit": "1GiB"}, "cuda:0/1": {"growth": "preallocate"}}})");
  EXPECT_EQ(config.device_policies.count("sim:16GiB"), 1u);
  EXPECT_EQ(config.device_policies.count("cuda:0/1"), 1u);
  EXPECT_EQ(config.policy_for(DeviceName::parse("sim:16GiB")).memory_limit, 1 * kGiB);
}

TEST(ConfigJson, RejectsAFractionOutOfRangeNamingTheKey) {
  EXPECT_EQ(rejection_of(R"({"devices": {"cuda:0": {"memory_fraction": 1.5}}})"),
            R"(config test.json: "devices"."cuda:0"."memory_fraction": must be a number in (0, 1], got 1.5)");
  EXPECT_THAT(rejection_of(R"({"policy": {"memory_fraction": 0}})"),
              HasSubstr(R"("policy"."memory_fraction": must be a number in (0, 1], got 0)"));
  EXPECT_THAT(rejection_of(R"({"policy": {"memory_fraction": -0.5}})"), HasSubstr("got -0.5"));
  EXPECT_THAT(rejection_of(R"({"policy": {"memory_fraction": "0.5"}})"), HasSubstr(R"(got "0.5")"));
}

// A run plan (docs/engine.md, "Run plans") is a path, per device or for every device; read when the device is made.
TEST(ConfigJson, RunPlanIsAPathInThePolicyOrADevice) {
  const Config config = parse_config_json(R"({"policy": {"run_plan": "all.plan"},
                                              "devices": {"cpu": {"run_plan": "cpu.plan"}}})");
  EXPECT_EQ(config.default_policy.run_plan, "all.plan");
  EXPECT_EQ(config.device_policies.at("cpu").run_plan, "cpu.plan");
  EXPECT_THAT(rejection_of(R"({"policy": {"run_plan": 3}})"),
              AllOf(HasSubstr(R"("policy"."run_plan")"), HasSubstr("plimsoll run-plan")));
  EXPECT_THAT(rejection_of(R"({"policy": {"run_plan": ""}})"), HasSubstr("give a path"));
}

TEST(ConfigJson, RejectsUnknownKeysListingTheKnownOnes) {
  const std::string top = rejection_of(R"({"polcy": {}})");
  EXPECT_THAT(top, StartsWith("config test.json: unknown key \"polcy\" (did you mean \"policy\"?)"));
  EXPECT_THAT(top, HasSubstr("policy, devices, cpu_fallback, visible_devices, log_device_creation"));

  const std::string policy = rejection_of(R"({"policy": {"memroy_limit": "8GiB"}})");
  EXPECT_THAT(policy,
              HasSubstr(R"(config test.json: "policy": unknown key "memroy_limit" (did you mean "memory_limit"?))"));
  EXPECT_THAT(policy, HasSubstr("growth, memory_limit, memory_fraction, reserve, release_threshold, thread_cache"));
  // logical_devices belongs to a device's entry, not to the default policy.
  EXPECT_THAT(rejection_of(R"({"policy": {"logical_devices": ["1GiB"]}})"),
              HasSubstr(R"(unknown key "logical_devices")"));

  const std::string device = rejection_of(R"({"devices": {"cuda:0": {"fraction": 0.5}}})");
  EXPECT_THAT(device, HasSubstr(R"("devices"."cuda:0": unknown key "fraction")"));
  EXPECT_THAT(device, HasSubstr("logical_devices"));

  EXPECT_THAT(rejection_of(R"({"colour": 1})"), Not(HasSubstr("did you mean")));
}

TEST(ConfigJson, RejectsLimitAndFractionInOneObject) {
  EXPECT_THAT(rejection_of(R"({"policy": {"memory_limit": "1GiB", "memory_fraction": 0.5}})"),
              HasSubstr(R"(config test.json: "policy": set memory_limit or memory_fraction, not both)"));
  EXPECT_THAT(rejection_of(R"({"devices": {"cpu": {"memory_limit": "1GiB", "memory_fraction": 0.5}}})"),
              HasSubstr(R"("devices"."cpu": set memory_limit or memory_fraction, not both)"));
}

TEST(ConfigJson, RejectsBadSizes) {
  EXPECT_THAT(rejection_of(R"({"policy": {"memory_limit": 0}})"),
              HasSubstr(R"("policy"."memory_limit": must be more than 0 bytes, got 0)"));
  EXPECT_THAT(rejection_of(R"({"policy": {"memory_limit": "0GiB"}})"), HasSubstr("must be more than 0 bytes"));
  for (const char* bad : {"-5", "1.5", "true", "null", "[1]"}) {
    EXPECT_THAT(rejection_of(std::string(R"({"policy": {"reserve": )") + bad + "}}"),
                HasSubstr(std::string(R"("policy"."reserve": must be a size: a whole number of bytes or a string )"
                                      R"(such as "8GiB", got )") +
                          bad))
        << bad;
  }
  EXPECT_THAT(rejection_of(R"({"policy": {"reserve": 1e300}})"),
              HasSubstr(R"("policy"."reserve": got 1e+300, too large to be exact as a JSON number; write the size )"
                        R"(as a string such as "20TiB")"));
  EXPECT_THAT(rejection_of(R"({"policy": {"reserve": 18446744073709551616}})"), HasSubstr("too large to be exact"));
  EXPECT_EQ(rejection_of(R"({"policy": {"reserve": 1e400}})"),
            "config test.json: invalid JSON: number overflow parsing '1e400'");
  const std::string unit = rejection_of(R"({"policy": {"release_threshold": "8 gigs"}})");
  EXPECT_THAT(unit, HasSubstr(R"("policy"."release_threshold": invalid size "8 gigs")"));
  EXPECT_THAT(unit, HasSubstr("KiB MiB GiB TiB"));
}

TEST(ConfigJson, RejectsBadGrowth) {
  EXPECT_THAT(rejection_of(R"({"policy": {"growth": "lazy"}})"),
              HasSubstr(R"("policy"."growth": invalid growth "lazy": expected "preallocate")"));
  EXPECT_THAT(rejection_of(R"({"policy": {"growth": true}})"),
              HasSubstr(R"("policy"."growth": must be "preallocate" or "on_demand", got true)"));
}

TEST(ConfigJson, RejectsBadDeviceNames) {
  const std::string message = rejection_of(R"({"devices": {"gpu0": {}}})");
  EXPECT_THAT(message, HasSubstr(R"(config test.json: "devices"."gpu0": invalid device "gpu0")"));
  EXPECT_THAT(message, HasSubstr("cuda:N"));
  EXPECT_THAT(rejection_of(R"({"devices": {"sim:16GiB": {}, "sim:16384MiB": {}}})"),
              HasSubstr("names the same device as another entry (sim:16GiB); merge the two"));
  EXPECT_THAT(rejection_of(R"({"devices": ["cuda:0"]})"), HasSubstr(R"("devices": must be a JSON object)"));
  EXPECT_THAT(rejection_of(R"({"devices": {"cuda:0": 0.5}})"),
              HasSubstr(R"("devices"."cuda:0": must be a JSON object such as {"memory_fraction": 0.9}, got 0.5)"));
}

TEST(ConfigJson, RejectsBadLogicalDevices) {
  EXPECT_THAT(rejection_of(R"({"devices": {"cuda:0/1": {"logical_devices": ["1GiB"]}}})"),
              HasSubstr(R"("devices"."cuda:0/1": logical_devices splits a physical device; move it to "cuda:0")"));
  EXPECT_THAT(rejection_of(R"({"devices": {"cuda:0": {"logical_devices": []}}})"),
              HasSubstr(R"("devices"."cuda:0"."logical_devices": must be a non-empty list of memory limits)"));
  EXPECT_THAT(rejection_of(R"({"devices": {"cuda:0": {"logical_devices": "4GiB"}}})"), HasSubstr(R"(got "4GiB")"));
  EXPECT_THAT(rejection_of(R"({"devices": {"cuda:0": {"logical_devices": ["4GiB", 0]}}})"),
              HasSubstr(R"("devices"."cuda:0"."logical_devices"[1]: must be more than 0 bytes, got 0)"));
}

TEST(ConfigJson, RejectsWrongTypesForTheOtherKeys) {
  EXPECT_THAT(rejection_of(R"({"cpu_fallback": "yes"})"),
              HasSubstr(R"(config test.json: "cpu_fallback": must be true or false (without quotes), got "yes")"));
  EXPECT_THAT(rejection_of(R"({"log_device_creation": 1})"),
              HasSubstr(R"("log_device_creation": must be true or false)"));
  EXPECT_THAT(rejection_of(R"({"visible_devices": 0})"),
              HasSubstr(R"("visible_devices": must be a string in CUDA_VISIBLE_DEVICES form such as "0,1", got 0)"));
  EXPECT_THAT(rejection_of(R"({"policy": "8GiB"})"), HasSubstr(R"("policy": must be a JSON object)"));
  EXPECT_THAT(rejection_of("[]"), HasSubstr("config test.json: must be a JSON object such as"));
}

TEST(ConfigJson, RejectsDuplicateKeys) {
  EXPECT_THAT(rejection_of(R"({"policy": {"reserve": 1, "reserve": 2}})"),
              HasSubstr(R"(config test.json: "policy": the key "reserve" appears twice in the same object; keep one)"));
  EXPECT_THAT(rejection_of(R"({"devices": {"cpu": {"reserve": 1}}, "devices": {}})"),
              HasSubstr(R"(config test.json: the key "devices" appears twice)"));
  EXPECT_THAT(rejection_of(R"({"devices": {"cpu": {"growth": "preallocate", "growth": "on_demand"}}})"),
              HasSubstr(R"("devices"."cpu": the key "growth" appears twice)"));
  // The same key in two different objects is fine.
  EXPECT_NO_THROW(parse_config_json(R"({"policy": {"reserve": 1}, "devices": {"cpu": {"reserve": 2}}})"));
}

TEST(ConfigJson, SyntaxErrorsGiveLineAndColumn) {
  const std::string message = rejection_of("{\n  \"policy\": {\n    \"reserve\": 1,\n  }\n}");
  EXPECT_THAT(message, StartsWith("config test.json: invalid JSON at line 4, column 3: "));
  EXPECT_THAT(message, HasSubstr("fix the syntax there"));
  EXPECT_THAT(message, Not(HasSubstr("[json.exception")));
  EXPECT_THAT(rejection_of(""), StartsWith("config test.json: invalid JSON at line 1, column 1: "));
  EXPECT_THAT(rejection_of("{\"policy\": {}} x"), StartsWith("config test.json: invalid JSON at line 1, column 16: "));
}

TEST(ConfigJson, OriginDefaultsToConfig) {
  try {
    parse_config_json("{\"x\": 1}");
    FAIL();
  } catch (const InvalidArgument& error) {
    EXPECT_THAT(error.what(), StartsWith("config config: unknown key \"x\""));
  }
}

class ConfigFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("plimsoll_policy_config_test_" + std::to_string(::getpid()) + "_" +
                                                     ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& text) {
    const std::filesystem::path path = dir_ / name;
    std::ofstream(path) << text;
    return path.string();
  }

  std::filesystem::path dir_;
};

TEST_F(ConfigFile, LoadsAFile) {
  const std::string path = write("plimsoll.json", R"({"policy": {"memory_limit": "3GiB"}, "cpu_fallback": true})");
  const Config config = load_config_file(path);
  EXPECT_EQ(config.default_policy.memory_limit, 3 * kGiB);
  EXPECT_TRUE(config.cpu_fallback);
}

TEST_F(ConfigFile, ErrorsNameTheFile) {
  const std::string path = write("bad.json", R"({"policy": {"memory_fraction": 2}})");
  try {
    load_config_file(path);
    FAIL();
  } catch (const InvalidArgument& error) {
    EXPECT_THAT(error.what(), StartsWith("config " + path + ": \"policy\".\"memory_fraction\": must be a number"));
  }
}

TEST_F(ConfigFile, MissingFileSaysWhy) {
  const std::string path = (dir_ / "absent.json").string();
  try {
    load_config_file(path);
    FAIL();
  } catch (const InvalidArgument& error) {
    EXPECT_THAT(error.what(), StartsWith("cannot read config file " + path + ": No such file or directory"));
  }
}

TEST_F(ConfigFile, DirectorySaysWhy) {
  try {
    load_config_file(dir_.string());
    FAIL();
  } catch (const InvalidArgument& error) {
    EXPECT_THAT(error.what(), StartsWith("cannot read config file " + dir_.string() + ": Is a directory"));
  }
}

TEST_F(ConfigFile, LargeFilesAreReadWhole) {
  // Longer than one read buffer, so a file cut at the first chunk would fail to parse.
  std::string padding(20000, ' ');
  const std::string path = write("big.json", "{" + padding + R"("policy": {"reserve": "7MiB"})" + padding + "}");
  EXPECT_EQ(load_config_file(path).default_policy.reserve, 7 * kMiB);
}

}  // namespace
}  // namespace plimsoll
