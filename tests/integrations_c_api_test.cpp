// The C ABI: every status code reachable, messages kept per thread, NULL arguments refused without a crash.
// These tests share Runtime::global(), as C callers do. ctest runs each test in its own process; run as one
// binary, the first test below is the first to touch the runtime, which its load_config check needs.
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>

#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "integrations/c_api_guard.hpp"
#include "plimsoll/plimsoll.h"

namespace {

using testing::AllOf;
using testing::HasSubstr;

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;

std::string last_error() { return plimsoll_last_error(); }

std::string lowercase(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

plimsoll_device* device_named(const char* name) {
  plimsoll_device* device = nullptr;
  EXPECT_EQ(plimsoll_get_device(name, &device), PLIMSOLL_OK) << last_error();
  EXPECT_NE(device, nullptr);
  return device;
}

plimsoll_stats stats_of(plimsoll_device* device) {
  plimsoll_stats stats{};
  EXPECT_EQ(plimsoll_get_stats(device, &stats), PLIMSOLL_OK) << last_error();
  return stats;
}

TEST(IntegrationsCApi, LoadConfigReplacesTheConfigUntilTheFirstDevice) {
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("plimsoll_c_api_test_" + std::to_string(::getpid()) + ".json");
  {
    std::ofstream file(path);
    file << R"({"devices": {"sim:2GiB": {"memory_limit": "1GiB"}}, "log_device_creation": false})";
  }
  const plimsoll_status loaded = plimsoll_load_config(path.c_str());
  if (loaded == PLIMSOLL_INVALID_STATE) {
    std::filesystem::remove(path);
    GTEST_SKIP() << "another test created a device first in this process: " << last_error();
  }
  ASSERT_EQ(loaded, PLIMSOLL_OK) << last_error();
  EXPECT_EQ(stats_of(device_named("sim:2GiB")).limit_bytes, kGiB);

  // Devices exist now: their policies are fixed, so a new config is refused.
  EXPECT_EQ(plimsoll_load_config(path.c_str()), PLIMSOLL_INVALID_STATE);
  EXPECT_THAT(last_error(), HasSubstr("sim:2GiB"));
  std::filesystem::remove(path);
}

TEST(IntegrationsCApi, LoadConfigRefusesAMissingFileAndNull) {
  EXPECT_EQ(plimsoll_load_config("/nonexistent/plimsoll.json"), PLIMSOLL_INVALID_ARGUMENT);
  EXPECT_THAT(last_error(), HasSubstr("/nonexistent/plimsoll.json"));
  EXPECT_EQ(plimsoll_load_config(nullptr), PLIMSOLL_INVALID_ARGUMENT);
  EXPECT_THAT(last_error(), HasSubstr("path is NULL"));
}

TEST(IntegrationsCApi, AllocateFreeAndStats) {
  plimsoll_device* device = device_named("sim:1GiB");
  void* block = nullptr;
  ASSERT_EQ(plimsoll_allocate(device, kMiB, "weights", &block), PLIMSOLL_OK) << last_error();
  EXPECT_NE(block, nullptr);
  void* untagged = nullptr;
  ASSERT_EQ(plimsoll_allocate(device, 4096, nullptr, &untagged), PLIMSOLL_OK) << last_error();

  const plimsoll_stats during = stats_of(device);
  EXPECT_GE(during.in_use_bytes, kMiB + 4096);
  EXPECT_EQ(during.live_allocations, 2u);
  EXPECT_EQ(during.allocations, 2u);
  EXPECT_GT(during.limit_bytes, 0u);

  std::uint64_t in_use = 0;
  std::uint64_t peak = 0;
  ASSERT_EQ(plimsoll_get_tag_stats(device, "weights", &in_use, &peak), PLIMSOLL_OK) << last_error();
  EXPECT_GE(in_use, kMiB);
  EXPECT_GE(peak, in_use);

  EXPECT_EQ(plimsoll_free(device, block), PLIMSOLL_OK) << last_error();
  EXPECT_EQ(plimsoll_free(device, untagged), PLIMSOLL_OK) << last_error();
  const plimsoll_stats after = stats_of(device);
  EXPECT_EQ(after.live_allocations, 0u);
  EXPECT_EQ(after.frees, 2u);
  ASSERT_EQ(plimsoll_get_tag_stats(device, "weights", &in_use, &peak), PLIMSOLL_OK) << last_error();
  EXPECT_EQ(in_use, 0u);
  EXPECT_GE(peak, kMiB);

  std::uint64_t released = 12345;
  EXPECT_EQ(plimsoll_trim(device, &released), PLIMSOLL_OK) << last_error();
  EXPECT_NE(released, 12345u);
  EXPECT_EQ(plimsoll_trim(device, nullptr), PLIMSOLL_OK) << last_error();
}

TEST(IntegrationsCApi, OutOfMemoryCarriesTheWholeReport) {
  plimsoll_device* device = device_named("sim:1GiB");
  void* block = reinterpret_cast<void*>(std::uintptr_t{1});
  EXPECT_EQ(plimsoll_allocate(device, 4 * kGiB, "activations", &block), PLIMSOLL_OUT_OF_MEMORY);
  EXPECT_EQ(block, nullptr);
  EXPECT_THAT(lowercase(last_error()), AllOf(HasSubstr("out of memory"), HasSubstr("sim:1gib")));
  EXPECT_GE(stats_of(device).ooms, 1u);
}

TEST(IntegrationsCApi, BadDeviceNamesAndSettingsAreInvalidArguments) {
  plimsoll_device* device = reinterpret_cast<plimsoll_device*>(std::uintptr_t{1});
  EXPECT_EQ(plimsoll_get_device("gpu7", &device), PLIMSOLL_INVALID_ARGUMENT);
  EXPECT_EQ(device, nullptr);
  EXPECT_THAT(last_error(), HasSubstr("gpu7"));

  EXPECT_EQ(plimsoll_configure("sim:5GiB", "memory_limt", "1GiB"), PLIMSOLL_INVALID_ARGUMENT);
  EXPECT_THAT(last_error(), AllOf(HasSubstr("unknown key \"memory_limt\""), HasSubstr("memory_limit")));
  EXPECT_EQ(plimsoll_configure("sim:5GiB", "memory_limit", "lots"), PLIMSOLL_INVALID_ARGUMENT);
  EXPECT_EQ(plimsoll_configure("sim:5GiB", "memory_fraction", "half"), PLIMSOLL_INVALID_ARGUMENT);
  EXPECT_THAT(last_error(), HasSubstr("half"));
  EXPECT_EQ(plimsoll_configure("sim:5GiB", "memory_fraction", "1.5"), PLIMSOLL_INVALID_ARGUMENT);
  EXPECT_EQ(plimsoll_configure("sim:5GiB", "growth", "sometimes"), PLIMSOLL_INVALID_ARGUMENT);
  EXPECT_EQ(plimsoll_configure("gpu7", "growth", "on_demand"), PLIMSOLL_INVALID_ARGUMENT);

  plimsoll_device* sim = device_named("sim:1GiB");
  std::uint64_t in_use = 0;
  std::uint64_t peak = 0;
  EXPECT_EQ(plimsoll_get_tag_stats(sim, "never-used-tag", &in_use, &peak), PLIMSOLL_INVALID_ARGUMENT);
  EXPECT_THAT(last_error(), HasSubstr("never-used-tag"));
}

TEST(IntegrationsCApi, NullPointersAreInvalidArgumentsNeverCrashes) {
  plimsoll_device* device = device_named("sim:1GiB");
  plimsoll_device* out_device = nullptr;
  void* block = nullptr;
  plimsoll_stats stats{};
  std::uint64_t value = 0;

  EXPECT_EQ(plimsoll_get_device(nullptr, &out_device), PLIMSOLL_INVALID_ARGUMENT);
  EXPECT_THAT(last_error(), HasSubstr("name is NULL"));
  EXPECT_EQ(plimsoll_get_device("cpu", nullptr), PLIMSOLL_INVALID_ARGUMENT);
  EXPECT_EQ(plimsoll_allocate(nullptr, 16, "t", &block), PLIMSOLL_INVALID_ARGUMENT);
  EXPECT_THAT(last_error(), AllOf(HasSubstr("plimsoll_allocate"), HasSubstr("device is NULL")));
  EXPECT_EQ(plimsoll_allocate(device, 16, "t", nullptr), PLIMSOLL_INVALID_ARGUMENT);
  EXPECT_EQ(plimsoll_free(nullptr, &value), PLIMSOLL_INVALID_ARGUMENT);
  EXPECT_EQ(plimsoll_trim(nullptr, &value), PLIMSOLL_INVALID_ARGUMENT);
  EXPECT_EQ(plimsoll_get_stats(nullptr, &stats), PLIMSOLL_INVALID_ARGUMENT);
  EXPECT_EQ(plimsoll_get_stats(device, nullptr), PLIMSOLL_INVALID_ARGUMENT);
  EXPECT_EQ(plimsoll_get_tag_stats(nullptr, "t", &value, &value), PLIMSOLL_INVALID_ARGUMENT);
  EXPECT_EQ(plimsoll_get_tag_stats(device, nullptr, &value, &value), PLIMSOLL_INVALID_ARGUMENT);
  EXPECT_EQ(plimsoll_get_tag_stats(device, "t", nullptr, &value), PLIMSOLL_INVALID_ARGUMENT);
  EXPECT_EQ(plimsoll_get_tag_stats(device, "t", &value, nullptr), PLIMSOLL_INVALID_ARGUMENT);
  EXPECT_EQ(plimsoll_configure(nullptr, "growth", "on_demand"), PLIMSOLL_INVALID_ARGUMENT);
  EXPECT_EQ(plimsoll_configure("cpu", nullptr, "on_demand"), PLIMSOLL_INVALID_ARGUMENT);
  EXPECT_EQ(plimsoll_configure("cpu", "growth", nullptr), PLIMSOLL_INVALID_ARGUMENT);
  // Like free(NULL): nothing to do, and no error.
  EXPECT_EQ(plimsoll_free(device, nullptr), PLIMSOLL_OK);
}

TEST(IntegrationsCApi, MissingGpuIsDeviceUnavailable) {
  plimsoll_device* device = reinterpret_cast<plimsoll_device*>(std::uintptr_t{1});
  EXPECT_EQ(plimsoll_get_device("cuda:99", &device), PLIMSOLL_DEVICE_UNAVAILABLE);
  EXPECT_EQ(device, nullptr);
  EXPECT_THAT(last_error(), AllOf(HasSubstr("cuda:99 is not available"), HasSubstr("PLIMSOLL_CPU_FALLBACK")));
}

TEST(IntegrationsCApi, ConfigureBeforeFirstAllocationAppliesAndAfterIsInvalidState) {
  ASSERT_EQ(plimsoll_configure("sim:3GiB", "memory_limit", "1GiB"), PLIMSOLL_OK) << last_error();
  plimsoll_device* device = device_named("sim:3GiB");
  EXPECT_EQ(stats_of(device).limit_bytes, kGiB);

  // Still no allocation: the device takes a new setting.
  ASSERT_EQ(plimsoll_configure("sim:3GiB", "memory_limit", "2GiB"), PLIMSOLL_OK) << last_error();
  EXPECT_EQ(stats_of(device).limit_bytes, 2 * kGiB);

  void* block = nullptr;
  ASSERT_EQ(plimsoll_allocate(device, kMiB, nullptr, &block), PLIMSOLL_OK) << last_error();
  EXPECT_EQ(plimsoll_configure("sim:3GiB", "growth", "preallocate"), PLIMSOLL_INVALID_STATE);
  EXPECT_THAT(last_error(), HasSubstr("first allocation"));
  EXPECT_EQ(stats_of(device).limit_bytes, 2 * kGiB);
  EXPECT_EQ(plimsoll_free(device, block), PLIMSOLL_OK);
}

TEST(IntegrationsCApi, BadFreesAreInvalidFree) {
  plimsoll_device* device = device_named("sim:1GiB");
  void* block = nullptr;
  ASSERT_EQ(plimsoll_allocate(device, kMiB, nullptr, &block), PLIMSOLL_OK) << last_error();
  ASSERT_EQ(plimsoll_free(device, block), PLIMSOLL_OK);
  EXPECT_EQ(plimsoll_free(device, block), PLIMSOLL_INVALID_FREE);
  EXPECT_THAT(last_error(), HasSubstr("free"));
  int local = 0;
  EXPECT_EQ(plimsoll_free(device, &local), PLIMSOLL_INVALID_FREE);
}

TEST(IntegrationsCApi, EveryOtherExceptionIsMappedWithItsMessage) {
  using plimsoll::c_api::guarded;
  EXPECT_EQ(guarded([] { throw std::logic_error("a broken invariant"); }), PLIMSOLL_INTERNAL);
  EXPECT_THAT(last_error(), AllOf(HasSubstr("internal error"), HasSubstr("a broken invariant")));
  EXPECT_EQ(guarded([] { throw 42; }), PLIMSOLL_INTERNAL);
  EXPECT_THAT(last_error(), HasSubstr("unknown exception"));
  EXPECT_EQ(guarded([] { throw std::bad_alloc(); }), PLIMSOLL_OUT_OF_MEMORY);
  EXPECT_THAT(last_error(), HasSubstr("out of memory"));
  EXPECT_EQ(guarded([] { throw plimsoll::InvalidState("wrong order"); }), PLIMSOLL_INVALID_STATE);
  EXPECT_EQ(guarded([] { throw plimsoll::InvalidFree("not live"); }), PLIMSOLL_INVALID_FREE);
  EXPECT_EQ(guarded([] { throw plimsoll::DeviceUnavailable("gone"); }), PLIMSOLL_DEVICE_UNAVAILABLE);
  EXPECT_EQ(guarded([] { throw plimsoll::InvalidArgument("bad"); }), PLIMSOLL_INVALID_ARGUMENT);
  EXPECT_EQ(guarded([] {}), PLIMSOLL_OK);
}

TEST(IntegrationsCApi, LastErrorBelongsToTheCallingThread) {
  EXPECT_EQ(plimsoll_get_device("not-a-device", nullptr), PLIMSOLL_INVALID_ARGUMENT);
  const std::string mine = last_error();
  ASSERT_FALSE(mine.empty());
  std::string other_thread = "unset";
  std::thread([&other_thread] { other_thread = plimsoll_last_error(); }).join();
  EXPECT_EQ(other_thread, "");
  EXPECT_EQ(last_error(), mine);
}

}  // namespace

namespace {

TEST(IntegrationsCApi, PauseAndResumeKeepTheAddressesAndRefuseTheWrongOrder) {
  plimsoll_device* device = device_named("sim:768MiB");
  void* block = nullptr;
  ASSERT_EQ(plimsoll_allocate(device, 64 * kMiB, "weights", &block), PLIMSOLL_OK) << last_error();
  EXPECT_EQ(plimsoll_resume(device), PLIMSOLL_INVALID_STATE);
  EXPECT_THAT(last_error(), HasSubstr("not paused"));
  uint64_t unmapped = 0;
  ASSERT_EQ(plimsoll_pause(device, 0, &unmapped), PLIMSOLL_OK) << last_error();
  EXPECT_GE(unmapped, 64 * kMiB);
  int paused = 0;
  ASSERT_EQ(plimsoll_is_paused(device, &paused), PLIMSOLL_OK);
  EXPECT_EQ(paused, 1);
  EXPECT_EQ(stats_of(device).reserved_bytes, 0u);
  void* refused = nullptr;
  EXPECT_EQ(plimsoll_allocate(device, kMiB, nullptr, &refused), PLIMSOLL_INVALID_STATE);
  EXPECT_THAT(last_error(), HasSubstr("paused"));
  EXPECT_EQ(plimsoll_pause(device, 0, nullptr), PLIMSOLL_INVALID_STATE);
  EXPECT_EQ(plimsoll_pause(device, 1, nullptr), PLIMSOLL_INVALID_STATE);
  ASSERT_EQ(plimsoll_resume(device), PLIMSOLL_OK) << last_error();
  ASSERT_EQ(plimsoll_is_paused(device, &paused), PLIMSOLL_OK);
  EXPECT_EQ(paused, 0);
  EXPECT_EQ(stats_of(device).reserved_bytes, unmapped);
  // A simulated device has no contents to keep: refused, and it keeps running.
  EXPECT_EQ(plimsoll_pause(device, 1, nullptr), PLIMSOLL_INVALID_STATE);
  EXPECT_THAT(last_error(), HasSubstr("without keeping them"));
  EXPECT_EQ(plimsoll_is_paused(device, nullptr), PLIMSOLL_INVALID_ARGUMENT);
  EXPECT_EQ(plimsoll_pause(nullptr, 0, nullptr), PLIMSOLL_INVALID_ARGUMENT);
  EXPECT_EQ(plimsoll_free(device, block), PLIMSOLL_OK);
  EXPECT_EQ(plimsoll::c_api::guarded([] { throw plimsoll::PauseError("no room"); }), PLIMSOLL_PAUSE_FAILED);
  EXPECT_THAT(last_error(), HasSubstr("no room"));
}

}  // namespace
