// Runtime: which devices exist (fake GPUs injected), what each is created with, and the errors for the rest.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "plimsoll/error.hpp"
#include "plimsoll/oom.hpp"
#include "plimsoll/runtime.hpp"

namespace {

using plimsoll::Config;
using plimsoll::DeviceListing;
using plimsoll::DeviceUnavailable;
using plimsoll::InvalidArgument;
using plimsoll::InvalidState;
using plimsoll::OutOfMemory;
using plimsoll::Policy;
using plimsoll::Runtime;
using testing::AllOf;
using testing::ElementsAre;
using testing::HasSubstr;
using testing::Not;

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;

std::string fake_uuid(int ordinal) {
  return fmt::format("GPU-{0}{0}{0}{0}{0}{0}{0}{0}-aaaa-bbbb-cccc-dddddddddddd", ordinal);
}

plimsoll::GpuScan fake_gpus(int count) {
  plimsoll::GpuScan scan;
  for (int i = 0; i < count; ++i) {
    plimsoll::GpuInfo gpu;
    gpu.ordinal = i;
    gpu.name = fmt::format("Fake GPU {}", i);
    gpu.total_bytes = 16 * kGiB;
    gpu.free_bytes = 15 * kGiB;
    gpu.uuid = fake_uuid(i);
    gpu.pci_bus_id = fmt::format("0000:{:02x}:00.0", 0x17 + i);
    gpu.compute_major = 9;
    scan.gpus.push_back(gpu);
  }
  return scan;
}

plimsoll::HostInfo fake_host() {
  plimsoll::HostInfo host;
  host.total_ram_bytes = 64 * kGiB;
  host.available_ram_bytes = 32 * kGiB;
  host.cgroup_limit_bytes = 16 * kGiB;
  return host;
}

Config quiet_config() {
  Config config;
  config.log_device_creation = false;
  return config;
}

std::unique_ptr<Runtime> make_runtime(Config config, plimsoll::GpuScan gpus) {
  auto runtime = std::make_unique<Runtime>(std::move(config));
  runtime->inject_hardware(std::move(gpus), fake_host());
  return runtime;
}

std::unique_ptr<Runtime> make_runtime(Config config, int gpu_count) {
  return make_runtime(std::move(config), fake_gpus(gpu_count));
}

template <typename Exception>
std::string error_of(Runtime& runtime, const std::string& device) {
  try {
    runtime.device(device);
  } catch (const Exception& error) {
    return error.what();
  }
  return "no error of the expected type";
}

std::vector<std::string> names_of(const std::vector<DeviceListing>& rows) {
  std::vector<std::string> names;
  for (const DeviceListing& row : rows) names.push_back(row.name);
  return names;
}

const DeviceListing& row_named(const std::vector<DeviceListing>& rows, const std::string& name) {
  for (const DeviceListing& row : rows) {
    if (row.name == name) return row;
  }
  throw std::runtime_error("no row " + name);
}

std::string joined(const std::vector<std::string>& lines) {
  std::string text;
  for (const std::string& line : lines) text += line + "\n";
  return text;
}

// --- GPUs that are not there ---

TEST(RuntimeDevices, NoDriverGivesTheDriversReasonAndTheChoices) {
  plimsoll::GpuScan scan;
  scan.unavailable_reason = "no CUDA driver (libcuda.so.1 not found)";
  auto runtime = make_runtime(quiet_config(), scan);
  EXPECT_THAT(error_of<DeviceUnavailable>(*runtime, "cuda:0"),
              AllOf(HasSubstr("cuda:0 is not available: no CUDA driver (libcuda.so.1 not found)"),
                    HasSubstr("use one of: cpu"), HasSubstr("or enable cpu_fallback (PLIMSOLL_CPU_FALLBACK=1)")));
}

TEST(RuntimeDevices, IndexPastTheVisibleGpusSaysHowManyThereAre) {
  auto runtime = make_runtime(quiet_config(), 2);
  EXPECT_THAT(error_of<DeviceUnavailable>(*runtime, "cuda:3"),
              AllOf(HasSubstr("cuda:3 is not available: 2 GPUs visible"), HasSubstr("PLIMSOLL_CPU_FALLBACK=1")));
}

TEST(RuntimeDevices, DriverWithNoGpusSaysSo) {
  auto runtime = make_runtime(quiet_config(), 0);
  EXPECT_THAT(error_of<DeviceUnavailable>(*runtime, "cuda:0"), HasSubstr("the CUDA driver shows no GPU"));
}

// inject_hardware lists GPUs with no driver behind them (tests with a driver use RuntimeAccess, see
// runtime_cuda_devices_test.cpp): they are listed, and creating one says why it cannot be.
TEST(RuntimeDevices, GpuListedWithoutADriverCannotBeCreated) {
  auto runtime = make_runtime(quiet_config(), 2);
  EXPECT_THAT(error_of<DeviceUnavailable>(*runtime, "cuda:0"),
              AllOf(HasSubstr("cuda:0 is not available"), HasSubstr("no CUDA driver is loaded")));
}

// --- PLIMSOLL_VISIBLE_DEVICES ---

TEST(RuntimeDevices, PlimsollVisibleDevicesSelectsAndRenumbersInTheOrderGiven) {
  Config config = quiet_config();
  config.visible_devices = "3,1";
  auto runtime = make_runtime(config, 4);
  const std::vector<DeviceListing> rows = runtime->list_devices();
  EXPECT_THAT(names_of(rows), ElementsAre("cpu", "cuda:0", "cuda:1"));
  EXPECT_THAT(row_named(rows, "cuda:0").details, HasSubstr(fake_uuid(3)));
  EXPECT_EQ(row_named(rows, "cuda:0").hardware, "Fake GPU 3");
  EXPECT_THAT(row_named(rows, "cuda:1").details, HasSubstr(fake_uuid(1)));

  EXPECT_THAT(error_of<DeviceUnavailable>(*runtime, "cuda:2"),
              HasSubstr("2 GPUs visible (PLIMSOLL_VISIBLE_DEVICES=\"3,1\" selects 2 of the 4 GPUs CUDA shows)"));

  const std::string report = joined(runtime->visibility_report());
  EXPECT_THAT(report, HasSubstr("PLIMSOLL_VISIBLE_DEVICES=\"3,1\""));
  EXPECT_THAT(report, HasSubstr("plimsoll cuda:0 is CUDA's cuda:3 (Fake GPU 3"));
  EXPECT_THAT(report, HasSubstr("plimsoll cuda:1 is CUDA's cuda:1 (Fake GPU 1"));
}

TEST(RuntimeDevices, PlimsollVisibleDevicesTakesUuidPrefixes) {
  Config config = quiet_config();
  config.visible_devices = "GPU-2222";
  auto runtime = make_runtime(config, 4);
  const std::vector<DeviceListing> rows = runtime->list_devices();
  EXPECT_THAT(names_of(rows), ElementsAre("cpu", "cuda:0"));
  EXPECT_EQ(row_named(rows, "cuda:0").hardware, "Fake GPU 2");
}

TEST(RuntimeDevices, PlimsollVisibleDevicesThatSelectsNothingIsExplained) {
  Config config = quiet_config();
  config.visible_devices = "";
  auto runtime = make_runtime(config, 4);
  EXPECT_THAT(names_of(runtime->list_devices()), ElementsAre("cpu"));
  EXPECT_THAT(joined(runtime->visibility_report()), HasSubstr("selects none of the 4 GPUs CUDA shows"));
  EXPECT_THAT(error_of<DeviceUnavailable>(*runtime, "cuda:0"), HasSubstr("0 GPUs visible"));
}

TEST(RuntimeDevices, WithoutPlimsollVisibleDevicesEveryGpuIsListedInCudasOrder) {
  auto runtime = make_runtime(quiet_config(), 2);
  const std::vector<DeviceListing> rows = runtime->list_devices();
  EXPECT_THAT(names_of(rows), ElementsAre("cpu", "cuda:0", "cuda:1"));
  EXPECT_EQ(row_named(rows, "cuda:1").hardware, "Fake GPU 1");
  EXPECT_THAT(joined(runtime->visibility_report()), HasSubstr("PLIMSOLL_VISIBLE_DEVICES is not set"));
}

TEST(RuntimeDevices, CudaVisibleDevicesIsExplainedNotApplied) {
  ASSERT_EQ(::setenv("CUDA_VISIBLE_DEVICES", "1,0,7", 1), 0);
  auto runtime = make_runtime(quiet_config(), 2);
  const std::string report = joined(runtime->visibility_report());
  const std::vector<DeviceListing> rows = runtime->list_devices();
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  EXPECT_THAT(report, HasSubstr("CUDA_VISIBLE_DEVICES=\"1,0,7\" (applied by CUDA, not by plimsoll)"));
  EXPECT_THAT(report, HasSubstr("lists 3 entries but CUDA shows 2 GPUs"));
  // Both GPUs CUDA shows stay visible: plimsoll does not apply the list a second time.
  EXPECT_THAT(names_of(rows), ElementsAre("cpu", "cuda:0", "cuda:1"));
}

TEST(RuntimeDevices, CudaVisibleDevicesIsSuspectedWhenTheDriverFindsNoGpu) {
  // What a one-GPU machine does with CUDA_VISIBLE_DEVICES=1,0: the list stops at "1", and cuInit finds no device.
  ASSERT_EQ(::setenv("CUDA_VISIBLE_DEVICES", "1,0", 1), 0);
  plimsoll::GpuScan scan;
  scan.unavailable_reason = "the CUDA driver sees no GPU (cuInit: CUDA_ERROR_NO_DEVICE (100))";
  auto runtime = make_runtime(quiet_config(), scan);
  const std::string report = joined(runtime->visibility_report());
  const std::string error = error_of<DeviceUnavailable>(*runtime, "cuda:0");
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  EXPECT_THAT(report, HasSubstr("CUDA_VISIBLE_DEVICES may be why the driver found no GPU"));
  EXPECT_THAT(report, HasSubstr("No GPU: the CUDA driver sees no GPU (cuInit: CUDA_ERROR_NO_DEVICE (100))"));
  EXPECT_THAT(error, HasSubstr("cuda:0 is not available: the CUDA driver sees no GPU"));
}

// --- CPU fallback ---

TEST(RuntimeDevices, FallbackGivesTheCpuDeviceAndOneNotice) {
  Config config = quiet_config();
  config.cpu_fallback = true;
  auto runtime = make_runtime(config, 2);
  testing::internal::CaptureStderr();
  plimsoll::Allocator& fallen_back = runtime->device("cuda:3");
  plimsoll::Allocator& again = runtime->device("cuda:3");
  const std::string notices = testing::internal::GetCapturedStderr();
  EXPECT_EQ(&fallen_back, &runtime->device("cpu"));
  EXPECT_EQ(&again, &fallen_back);
  EXPECT_EQ(fallen_back.description().name, "cpu");
  EXPECT_EQ(notices, "plimsoll: cuda:3 is not available (2 GPUs visible); falling back to cpu\n");
}

TEST(RuntimeDevices, FallbackAlsoCoversAGpuWithoutADriver) {
  Config config = quiet_config();
  config.cpu_fallback = true;
  auto runtime = make_runtime(config, 1);
  testing::internal::CaptureStderr();
  EXPECT_EQ(runtime->device("cuda:0").description().name, "cpu");
  EXPECT_THAT(testing::internal::GetCapturedStderr(),
              AllOf(HasSubstr("plimsoll: cuda:0 is not available (no CUDA driver is loaded"),
                    HasSubstr("falling back to cpu")));
}

// --- Creating devices ---

TEST(RuntimeDevices, SimDeviceGetsItsSizeAndTheDefaultReserve) {
  auto runtime = make_runtime(quiet_config(), 0);
  plimsoll::Allocator& sim = runtime->device("sim:4GiB");
  const plimsoll::DeviceDescription description = sim.description();
  const std::uint64_t reserve = plimsoll::default_reserve(plimsoll::DeviceKind::sim, 4 * kGiB);
  EXPECT_EQ(description.name, "sim:4GiB");
  EXPECT_EQ(description.hardware, "simulated device");
  EXPECT_EQ(description.total_bytes, 4 * kGiB);
  EXPECT_EQ(description.limit_bytes, 4 * kGiB - reserve);
  EXPECT_EQ(description.policy.reserve, reserve);
  // Spelled differently, the same device.
  EXPECT_EQ(&runtime->device("sim:4096MiB"), &sim);
  void* block = sim.allocate(64 * kMiB);
  EXPECT_NE(block, nullptr);
  sim.deallocate(block);
}

TEST(RuntimeDevices, CpuDeviceIsBoundedByTheInjectedHostsCgroupLimit) {
  Config config = quiet_config();
  config.device_policies["cpu"].reserve = kGiB;
  auto runtime = make_runtime(config, 0);
  plimsoll::Allocator& cpu = runtime->device("cpu");
  EXPECT_EQ(cpu.description().hardware, "host");
  EXPECT_EQ(cpu.description().limit_bytes, 15 * kGiB);  // 16 GiB cgroup limit - 1 GiB reserve
  auto* bytes = static_cast<unsigned char*>(cpu.allocate(kMiB));
  std::memset(bytes, 0xab, kMiB);  // real, writable memory
  EXPECT_EQ(bytes[kMiB - 1], 0xab);
  cpu.deallocate(bytes);
}

TEST(RuntimeDevices, LimitAboveWhatTheDeviceHasIsRefusedAtCreation) {
  Config config = quiet_config();
  config.device_policies["sim:16GiB"].memory_limit = 20 * kGiB;
  auto runtime = make_runtime(config, 0);
  EXPECT_THAT(error_of<InvalidArgument>(*runtime, "sim:16GiB"),
              AllOf(HasSubstr("memory_limit 20.00 GiB for sim:16GiB exceeds what the device can give"),
                    HasSubstr("lower it")));
  // The listing shows the device anyway, with the reason it cannot be created.
  EXPECT_THAT(row_named(runtime->list_devices(), "sim:16GiB").details, HasSubstr("cannot be created"));
}

TEST(RuntimeDevices, FractionIsAppliedToTheTotal) {
  Config config = quiet_config();
  config.device_policies["sim:16GiB"].memory_fraction = 0.25;
  auto runtime = make_runtime(config, 0);
  EXPECT_EQ(runtime->device("sim:16GiB").description().limit_bytes, 4 * kGiB);
}

TEST(RuntimeDevices, AllocationsBeyondTheLimitThrowOutOfMemory) {
  Config config = quiet_config();
  config.device_policies["sim:8GiB"].memory_limit = kGiB;
  auto runtime = make_runtime(config, 0);
  plimsoll::Allocator& sim = runtime->device("sim:8GiB");
  EXPECT_THROW(sim.allocate(2 * kGiB), OutOfMemory);
}

// --- Logical devices ---

Config split_sim_8gib(std::uint64_t first, std::uint64_t second) {
  Config config = quiet_config();
  config.device_policies["sim:8GiB"].reserve = 0;
  config.logical_devices["sim:8GiB"] = {{first}, {second}};
  return config;
}

TEST(RuntimeDevices, LogicalDevicesEachEnforceTheirOwnLimit) {
  auto runtime = make_runtime(split_sim_8gib(3 * kGiB, 3 * kGiB), 0);
  plimsoll::Allocator& first = runtime->device("sim:8GiB/0");
  plimsoll::Allocator& second = runtime->device("sim:8GiB/1");
  ASSERT_NE(&first, &second);
  EXPECT_EQ(first.description().name, "sim:8GiB/0");
  EXPECT_EQ(first.description().limit_bytes, 3 * kGiB);
  EXPECT_EQ(second.description().limit_bytes, 3 * kGiB);
  EXPECT_EQ(first.description().total_bytes, 8 * kGiB);

  void* a = first.allocate(2 * kGiB);
  EXPECT_THROW(first.allocate(2 * kGiB), OutOfMemory);  // 4 GiB > its 3 GiB, though the device has 8
  void* b = second.allocate(2 * kGiB);                  // the sibling's budget is untouched
  EXPECT_THROW(second.allocate(2 * kGiB), OutOfMemory);
  first.deallocate(a);
  second.deallocate(b);
}

TEST(RuntimeDevices, LogicalDevicesDrawOnOnePhysicalCapacity) {
  auto runtime = make_runtime(split_sim_8gib(3 * kGiB, 3 * kGiB), 0);
  plimsoll::Allocator& first = runtime->device("sim:8GiB/0");
  plimsoll::Allocator& second = runtime->device("sim:8GiB/1");
  void* a = first.allocate(2 * kGiB);
  try {
    second.allocate(4 * kGiB);
    FAIL() << "4 GiB fit in a 3 GiB logical device";
  } catch (const OutOfMemory& error) {
    // What the shared device reports free already counts the sibling's 2 GiB.
    EXPECT_LE(error.details().device_free_bytes, 6 * kGiB);
  }
  first.deallocate(a);
}

TEST(RuntimeDevices, LogicalSplitLargerThanTheDeviceIsRefused) {
  auto runtime = make_runtime(split_sim_8gib(5 * kGiB, 5 * kGiB), 0);
  EXPECT_THAT(error_of<InvalidArgument>(*runtime, "sim:8GiB/0"),
              AllOf(HasSubstr("10.00 GiB in total (5.00 GiB + 5.00 GiB)"), HasSubstr("8.00 GiB total"),
                    HasSubstr("lower their memory limits")));
}

TEST(RuntimeDevices, EqualShareLogicalDevicesSplitThePhysicalLimit) {
  Config config = quiet_config();
  config.device_policies["sim:8GiB"].reserve = 0;
  config.device_policies["sim:8GiB"].memory_limit = 6 * kGiB;
  config.logical_devices["sim:8GiB"] = {plimsoll::LogicalDeviceConfig::equal(),
                                        plimsoll::LogicalDeviceConfig::sized(2 * kGiB),
                                        plimsoll::LogicalDeviceConfig::equal()};
  auto runtime = make_runtime(config, 0);
  EXPECT_EQ(runtime->device("sim:8GiB/0").description().limit_bytes, 2 * kGiB);
  EXPECT_EQ(runtime->device("sim:8GiB/1").description().limit_bytes, 2 * kGiB);
  plimsoll::Allocator& last = runtime->device("sim:8GiB/2");
  EXPECT_EQ(last.description().limit_bytes, 2 * kGiB);
  EXPECT_THROW(last.allocate(3 * kGiB), OutOfMemory);
  // The listing shows the shares the devices get, and the split's total on the physical row.
  const std::vector<DeviceListing> rows = runtime->list_devices();
  EXPECT_EQ(row_named(rows, "sim:8GiB/2").limit_bytes, 2 * kGiB);
  EXPECT_EQ(row_named(rows, "sim:8GiB").limit_bytes, 6 * kGiB);
}

TEST(RuntimeDevices, SplitPhysicalDeviceMustBeAskedForByLogicalName) {
  auto runtime = make_runtime(split_sim_8gib(3 * kGiB, 3 * kGiB), 0);
  EXPECT_THAT(error_of<InvalidArgument>(*runtime, "sim:8GiB"),
              AllOf(HasSubstr("sim:8GiB is split into 2 logical devices"), HasSubstr("sim:8GiB/0 .. sim:8GiB/1")));
  EXPECT_THAT(error_of<DeviceUnavailable>(*runtime, "sim:8GiB/2"),
              HasSubstr("sim:8GiB/2 does not exist: sim:8GiB is split into 2 logical devices"));
  EXPECT_THAT(error_of<DeviceUnavailable>(*runtime, "cpu/0"),
              AllOf(HasSubstr("cpu/0 does not exist"), HasSubstr("logical_devices")));
}

TEST(RuntimeDevices, CpuSplitIsListedAfterTheHost) {
  Config config = quiet_config();
  config.device_policies["cpu"].reserve = 0;
  config.logical_devices["cpu"] = {{2 * kGiB}, {kGiB}};
  auto runtime = make_runtime(config, 1);
  const std::vector<DeviceListing> rows = runtime->list_devices();
  EXPECT_THAT(names_of(rows), ElementsAre("cpu", "cpu/0", "cpu/1", "cuda:0"));
  EXPECT_EQ(row_named(rows, "cpu/0").limit_bytes, 2 * kGiB);
  EXPECT_EQ(row_named(rows, "cpu/1").limit_bytes, kGiB);
  EXPECT_THAT(row_named(rows, "cpu").details, HasSubstr("split into 2 logical devices"));
  EXPECT_EQ(runtime->device("cpu/1").description().limit_bytes, kGiB);
}

// --- Policies ---

TEST(RuntimeDevices, ConfigureBeforeCreationIsUsedAtCreation) {
  auto runtime = make_runtime(quiet_config(), 0);
  Policy policy;
  policy.memory_limit = kGiB;
  runtime->configure("sim:4GiB", policy);
  EXPECT_EQ(runtime->policy_for("sim:4GiB").memory_limit, kGiB);
  EXPECT_EQ(runtime->device("sim:4GiB").description().limit_bytes, kGiB);
}

TEST(RuntimeDevices, ConfigureBeforeTheFirstAllocationChangesTheLimit) {
  auto runtime = make_runtime(quiet_config(), 0);
  plimsoll::Allocator& sim = runtime->device("sim:4GiB");
  Policy policy;
  policy.memory_limit = kGiB;
  runtime->configure("sim:4GiB", policy);
  EXPECT_EQ(sim.description().limit_bytes, kGiB);
  EXPECT_THROW(sim.allocate(2 * kGiB), OutOfMemory);
}

TEST(RuntimeDevices, ConfigureWorksTheFractionOutOnceWithTheRuntimesRules) {
  auto runtime = make_runtime(quiet_config(), 0);
  plimsoll::Allocator& sim = runtime->device("sim:4GiB");
  Policy policy;
  policy.memory_fraction = 0.25;
  policy.reserve = 0;
  runtime->configure("sim:4GiB", policy);
  // The allocator shows the policy as asked for and the limit the runtime's budget rules gave it.
  EXPECT_EQ(sim.description().limit_bytes, kGiB);
  EXPECT_EQ(sim.description().policy.memory_fraction, 0.25);
  EXPECT_FALSE(sim.description().policy.memory_limit.has_value());
  // A limit the device cannot give is refused by the same rules as at creation, and nothing changes.
  Policy too_much;
  too_much.memory_limit = 5 * kGiB;
  EXPECT_THROW(runtime->configure("sim:4GiB", too_much), InvalidArgument);
  EXPECT_EQ(sim.description().limit_bytes, kGiB);
}

TEST(RuntimeDevices, PolicyChangeAfterTheFirstAllocationIsInvalidState) {
  auto runtime = make_runtime(quiet_config(), 0);
  plimsoll::Allocator& sim = runtime->device("sim:4GiB");
  sim.deallocate(sim.allocate(kMiB));
  Policy policy;
  policy.memory_limit = kGiB;
  EXPECT_THROW(runtime->configure("sim:4GiB", policy), InvalidState);
  EXPECT_THROW(sim.set_limits({policy, kGiB}), InvalidState);
  // The refused change is not remembered either.
  EXPECT_NE(runtime->policy_for("sim:4GiB").memory_limit, kGiB);
}

TEST(RuntimeDevices, ConfigureRefusesAnInvalidPolicy) {
  auto runtime = make_runtime(quiet_config(), 0);
  Policy policy;
  policy.memory_limit = kGiB;
  policy.memory_fraction = 0.5;
  EXPECT_THROW(runtime->configure("sim:4GiB", policy), InvalidArgument);
  EXPECT_THROW(runtime->configure("gpu0", Policy{}), InvalidArgument);
}

TEST(RuntimeDevices, ReplaceConfigOnlyBeforeAnyDeviceExists) {
  auto runtime = make_runtime(quiet_config(), 0);
  Config replacement = quiet_config();
  replacement.device_policies["sim:4GiB"].memory_limit = 2 * kGiB;
  runtime->replace_config(replacement);
  EXPECT_EQ(runtime->device("sim:4GiB").description().limit_bytes, 2 * kGiB);
  try {
    runtime->replace_config(quiet_config());
    FAIL() << "the config was replaced under a live device";
  } catch (const InvalidState& error) {
    EXPECT_THAT(error.what(), AllOf(HasSubstr("sim:4GiB"), HasSubstr("plimsoll_configure")));
  }
}

// --- Runtime behaviour ---

TEST(RuntimeDevices, CreationIsLoggedOnceUnlessDisabled) {
  Config config;
  config.log_device_creation = true;
  auto runtime = make_runtime(config, 0);
  testing::internal::CaptureStderr();
  runtime->device("sim:1GiB");
  runtime->device("sim:1GiB");
  const std::string log = testing::internal::GetCapturedStderr();
  const std::string summary = runtime->device("sim:1GiB").description().summary();
  EXPECT_EQ(log, summary + "\n");

  auto quiet = make_runtime(quiet_config(), 0);
  testing::internal::CaptureStderr();
  quiet->device("sim:1GiB");
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

TEST(RuntimeDevices, ConcurrentFirstUseCreatesOneDevice) {
  auto runtime = make_runtime(quiet_config(), 0);
  constexpr int kThreads = 8;
  std::vector<plimsoll::Allocator*> seen(kThreads, nullptr);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&runtime, &seen, i] { seen[static_cast<std::size_t>(i)] = &runtime->device("sim:2GiB"); });
  }
  for (std::thread& thread : threads) thread.join();
  for (plimsoll::Allocator* allocator : seen) EXPECT_EQ(allocator, seen.front());
}

TEST(RuntimeDevices, ReferencesStayValidAsMoreDevicesAreCreated) {
  auto runtime = make_runtime(quiet_config(), 0);
  plimsoll::Allocator& first = runtime->device("sim:1GiB");
  for (int gib = 2; gib < 20; ++gib) runtime->device(fmt::format("sim:{}GiB", gib));
  EXPECT_EQ(first.description().name, "sim:1GiB");
  EXPECT_EQ(&runtime->device("sim:1GiB"), &first);
}

TEST(RuntimeDevices, ListingShowsGpuLimitsWithoutCreatingAnything) {
  Config config = quiet_config();
  config.device_policies["cuda:1"].reserve = kGiB;
  auto runtime = make_runtime(config, 2);
  const std::vector<DeviceListing> rows = runtime->list_devices();
  const DeviceListing gpu = row_named(rows, "cuda:1");
  EXPECT_EQ(gpu.total_bytes, 16 * kGiB);
  EXPECT_EQ(gpu.free_bytes, 15 * kGiB);
  EXPECT_EQ(gpu.limit_bytes, 14 * kGiB);  // free - reserve
  EXPECT_EQ(gpu.policy.reserve, kGiB);
  EXPECT_THAT(gpu.details, AllOf(HasSubstr(fake_uuid(1)), HasSubstr("PCI 0000:18:00.0"), HasSubstr("compute 9.0")));
  const DeviceListing host = row_named(rows, "cpu");
  EXPECT_EQ(host.total_bytes, 64 * kGiB);
  EXPECT_THAT(host.details, HasSubstr("cgroup memory limit 16.00 GiB"));
  EXPECT_THAT(host.details, Not(HasSubstr("cannot be created")));
}

}  // namespace
