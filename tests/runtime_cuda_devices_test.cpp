// cuda:N devices created by Runtime over the CUDA backings, against the fake driver (tests/fake_cuda_driver.hpp):
// growth, trim, limits, logical devices, and the plain-region fallback on a GPU without virtual memory management.
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "fake_cuda_driver.hpp"
#include "plimsoll/error.hpp"
#include "plimsoll/oom.hpp"
#include "plimsoll/runtime.hpp"
#include "runtime/runtime_access.hpp"

namespace {

namespace cu = plimsoll::cuda_driver;
using plimsoll::Allocator;
using plimsoll::Config;
using plimsoll::DeviceUnavailable;
using plimsoll::Growth;
using plimsoll::InvalidArgument;
using plimsoll::OutOfMemory;
using plimsoll::Runtime;
using plimsoll::fake_cuda::Driver;
using plimsoll::fake_cuda::kMiB;
using testing::AllOf;
using testing::HasSubstr;

constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;
constexpr std::uint64_t kGranule = 2 * kMiB;
// 256 MiB of compute capability 9.0 (the fake's): the default reserve is TensorFlow's 225 MiB floor for a GPU
// under 2 GiB, capped at a quarter of the total, so the default budget is 256 - 64 = 192 MiB.
constexpr std::uint64_t kCapacity = 256 * kMiB;
constexpr std::uint64_t kDefaultLimit = 192 * kMiB;

plimsoll::fake_cuda::Options fake_gpu(bool vmm = true) {
  plimsoll::fake_cuda::Options options;
  options.capacity_bytes = kCapacity;
  options.vmm_supported = vmm;
  return options;
}

plimsoll::HostInfo fake_host() {
  plimsoll::HostInfo host;
  host.total_ram_bytes = 16 * kGiB;
  host.available_ram_bytes = 8 * kGiB;
  return host;
}

Config quiet_config() {
  Config config;
  config.log_device_creation = false;
  return config;
}

std::unique_ptr<Runtime> runtime_on(const Driver& driver, Config config) {
  auto runtime = std::make_unique<Runtime>(std::move(config));
  plimsoll::runtime::RuntimeAccess::inject_driver(*runtime, driver.api(), fake_host());
  return runtime;
}

/// What cudaMemGetInfo tells any process: the driver's free memory (inside a context, as the driver requires).
std::uint64_t driver_free_bytes(const Driver& driver) {
  const cu::Api& api = driver.api();
  cu::Context context = nullptr;
  EXPECT_EQ(api.primary_ctx_retain(&context, 0), cu::kSuccess);
  EXPECT_EQ(api.ctx_push_current(context), cu::kSuccess);
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  EXPECT_EQ(api.mem_get_info(&free_bytes, &total_bytes), cu::kSuccess);
  cu::Context popped = nullptr;
  api.ctx_pop_current(&popped);
  api.primary_ctx_release(0);
  return free_bytes;
}

template <typename Exception>
std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const Exception& error) {
    return error.what();
  }
  return "no error of the expected type";
}

TEST(RuntimeCudaDevices, OnDemandGrowsByGranulesAndTrimGivesThemBackToTheDriver) {
  Driver driver(fake_gpu());
  auto runtime = runtime_on(driver, quiet_config());
  Allocator& gpu = runtime->device("cuda:0");
  EXPECT_EQ(gpu.description().hardware, "Fake GPU (memfd)");
  EXPECT_EQ(gpu.description().policy.growth, Growth::on_demand);
  EXPECT_EQ(gpu.description().limit_bytes, kDefaultLimit);
  EXPECT_EQ(driver.mapped_bytes(), 0u);  // on_demand takes nothing at creation

  void* first = gpu.allocate(3 * kMiB);
  std::memset(first, 0x5a, 3 * kMiB);  // the fake's memory is real: the mapping must be read/write
  const std::uint64_t after_first = driver.mapped_bytes();
  EXPECT_GE(after_first, 3 * kMiB);
  EXPECT_LT(after_first, 16 * kMiB);
  EXPECT_EQ(after_first % kGranule, 0u);
  EXPECT_EQ(driver.counters().create, after_first / kGranule);  // one cuMemCreate per granule

  void* second = gpu.allocate(20 * kMiB);
  EXPECT_GE(driver.mapped_bytes(), after_first + 20 * kMiB - kGranule);
  EXPECT_EQ(driver.mapped_bytes(), gpu.stats().reserved_bytes);
  EXPECT_EQ(driver_free_bytes(driver), kCapacity - driver.mapped_bytes());

  gpu.deallocate(second);
  gpu.deallocate(first);
  EXPECT_GT(gpu.trim(), 0u);
  EXPECT_EQ(driver.mapped_bytes(), 0u);
  EXPECT_EQ(driver.counters().release, driver.counters().create);
  // Visible to another process through cudaMemGetInfo.
  EXPECT_EQ(driver_free_bytes(driver), kCapacity);
}

TEST(RuntimeCudaDevices, PreallocateMapsTheWholeBudget) {
  Driver driver(fake_gpu());
  Config config = quiet_config();
  config.device_policies["cuda:0"].growth = Growth::preallocate;
  auto runtime = runtime_on(driver, config);
  Allocator& gpu = runtime->device("cuda:0");
  // Taken at creation (the heap maps its whole span then, as for host preallocate), all at once.
  EXPECT_EQ(driver.mapped_bytes(), kDefaultLimit);
  EXPECT_EQ(driver_free_bytes(driver), kCapacity - kDefaultLimit);
  void* block = gpu.allocate(kMiB);
  EXPECT_EQ(gpu.stats().reserved_bytes, kDefaultLimit);
  gpu.deallocate(block);
  EXPECT_EQ(gpu.trim(), 0u);  // held for the process's life, by design
  EXPECT_EQ(driver.mapped_bytes(), kDefaultLimit);
}

TEST(RuntimeCudaDevices, MemoryLimitCapsTheDeviceWithAnOomReportNamingIt) {
  Driver driver(fake_gpu());
  Config config = quiet_config();
  config.device_policies["cuda:0"].memory_limit = 32 * kMiB;
  auto runtime = runtime_on(driver, config);
  Allocator& gpu = runtime->device("cuda:0");
  void* held = gpu.allocate(24 * kMiB);
  const std::string report = error_of<OutOfMemory>([&] { gpu.allocate(16 * kMiB); });
  EXPECT_THAT(report, HasSubstr("cuda:0"));
  EXPECT_LE(driver.mapped_bytes(), 32 * kMiB);  // the driver had room; the limit refused
  gpu.deallocate(held);
}

TEST(RuntimeCudaDevices, MemoryFractionIsOfTheTotal) {
  Driver driver(fake_gpu());
  Config config = quiet_config();
  config.device_policies["cuda:0"].memory_fraction = 0.25;
  auto runtime = runtime_on(driver, config);
  Allocator& gpu = runtime->device("cuda:0");
  EXPECT_EQ(gpu.description().limit_bytes, kCapacity / 4);
  EXPECT_THAT(error_of<OutOfMemory>([&] { gpu.allocate(80 * kMiB); }), HasSubstr("cuda:0"));
  EXPECT_EQ(driver.mapped_bytes(), 0u);  // nothing left half-mapped
}

TEST(RuntimeCudaDevices, LogicalDevicesSplitOneGpuEachWithinItsLimit) {
  Driver driver(fake_gpu());
  Config config = quiet_config();
  config.logical_devices["cuda:0"] = {{48 * kMiB}, {48 * kMiB}};
  auto runtime = runtime_on(driver, config);
  Allocator& left = runtime->device("cuda:0/0");
  Allocator& right = runtime->device("cuda:0/1");
  EXPECT_EQ(left.description().limit_bytes, 48 * kMiB);
  EXPECT_EQ(right.description().limit_bytes, 48 * kMiB);
  void* a = left.allocate(40 * kMiB);
  void* b = right.allocate(40 * kMiB);
  std::memset(a, 1, 40 * kMiB);
  std::memset(b, 2, 40 * kMiB);
  EXPECT_EQ(static_cast<unsigned char*>(a)[40 * kMiB - 1], 1);  // one GPU, two disjoint heaps
  EXPECT_THAT(error_of<OutOfMemory>([&] { left.allocate(16 * kMiB); }), HasSubstr("cuda:0/0"));
  EXPECT_THAT(error_of<OutOfMemory>([&] { right.allocate(16 * kMiB); }), HasSubstr("cuda:0/1"));
  // Both draw on the one backing: the driver holds exactly what the two heaps hold.
  EXPECT_EQ(driver.mapped_bytes(), left.stats().reserved_bytes + right.stats().reserved_bytes);
  EXPECT_EQ(driver.counters().primary_retain - driver.counters().primary_release, 1u);  // one context kept
  left.deallocate(a);
  right.deallocate(b);
  left.trim();
  right.trim();
  EXPECT_EQ(driver.mapped_bytes(), 0u);
}

TEST(RuntimeCudaDevices, WithoutVmmPlainRegionsArePreallocatedAndTheLineSaysWhy) {
  Driver driver(fake_gpu(/*vmm=*/false));
  auto runtime = runtime_on(driver, Config{});  // logging on: the "created device" line is checked
  testing::internal::CaptureStderr();
  Allocator& gpu = runtime->device("cuda:0");
  const std::string line = testing::internal::GetCapturedStderr();
  EXPECT_EQ(gpu.description().policy.growth, Growth::preallocate);
  EXPECT_THAT(line, AllOf(HasSubstr("plimsoll: created device cuda:0"), HasSubstr("policy preallocate"),
                          HasSubstr("plain CUDA regions, preallocated because the GPU does not support virtual "
                                    "memory management")));
  void* block = gpu.allocate(5 * kMiB);
  std::memset(block, 7, 5 * kMiB);
  EXPECT_EQ(driver.counters().mem_alloc, 1u);  // the whole budget in one cuMemAlloc
  EXPECT_EQ(driver.counters().create, 0u);
  EXPECT_EQ(driver_free_bytes(driver), kCapacity - kDefaultLimit);
  gpu.deallocate(block);
}

TEST(RuntimeCudaDevices, WithoutVmmOnDemandAskedForTheDeviceIsRefusedWithTheFix) {
  Driver driver(fake_gpu(/*vmm=*/false));
  Config config = quiet_config();
  config.default_policy.growth = Growth::preallocate;
  config.device_policies["cuda:0"].growth = Growth::on_demand;
  auto runtime = runtime_on(driver, config);
  EXPECT_THAT(error_of<InvalidArgument>([&] { runtime->device("cuda:0"); }),
              AllOf(HasSubstr("cuda:0 cannot grow on demand"), HasSubstr("virtual memory management"),
                    HasSubstr("\"growth\": \"preallocate\"")));
  EXPECT_EQ(driver.counters().mem_alloc, 0u);
}

TEST(RuntimeCudaDevices, WithoutVmmConfigureKeepsTheDevicePreallocated) {
  Driver driver(fake_gpu(/*vmm=*/false));
  auto runtime = runtime_on(driver, quiet_config());
  runtime->device("cuda:0");
  plimsoll::Policy policy;
  policy.memory_limit = 64 * kMiB;  // growth left at on_demand, the default
  runtime->configure("cuda:0", policy);
  Allocator& gpu = runtime->device("cuda:0");
  EXPECT_EQ(gpu.description().policy.growth, Growth::preallocate);
  void* block = gpu.allocate(kMiB);
  EXPECT_EQ(driver_free_bytes(driver), kCapacity - 64 * kMiB);
  gpu.deallocate(block);
}

TEST(RuntimeCudaDevices, ListingShowsTheFakeGpuWithItsBudget) {
  Driver driver(fake_gpu());
  auto runtime = runtime_on(driver, quiet_config());
  bool found = false;
  for (const plimsoll::DeviceListing& row : runtime->list_devices()) {
    if (row.name != "cuda:0") continue;
    found = true;
    EXPECT_EQ(row.limit_bytes, kDefaultLimit);
    EXPECT_THAT(row.details, AllOf(HasSubstr("compute 9.0"), testing::Not(HasSubstr("no CUDA driver"))));
  }
  EXPECT_TRUE(found);
}

// The driver's ordinals, as cuDeviceGet was asked for them (a plain function pointer cannot capture).
std::vector<int> asked_ordinals;

TEST(RuntimeCudaDevices, PlimsollVisibleDevicesPicksTheDriversOrdinal) {
  Driver driver(fake_gpu());
  // Two GPUs for the scan; both are the fake's one device underneath.
  cu::Api api = driver.api();
  api.device_get_count = [](int* count) {
    *count = 2;
    return cu::kSuccess;
  };
  api.device_get = [](cu::Device* device, int ordinal) {
    asked_ordinals.push_back(ordinal);
    *device = 0;
    return ordinal < 2 ? cu::kSuccess : cu::kErrorInvalidValue;
  };
  Config config = quiet_config();
  config.visible_devices = "1";
  auto runtime = std::make_unique<Runtime>(config);
  plimsoll::runtime::RuntimeAccess::inject_driver(*runtime, api, fake_host());
  asked_ordinals.clear();
  runtime->device("cuda:0");  // plimsoll's cuda:0 is CUDA's cuda:1
  EXPECT_EQ(asked_ordinals, std::vector<int>{1});
}

TEST(RuntimeCudaDevices, NoDriverStillSaysWhy) {
  auto runtime = std::make_unique<Runtime>(quiet_config());
  plimsoll::GpuScan scan;
  scan.unavailable_reason = "no CUDA driver (libcuda.so.1 not found)";
  runtime->inject_hardware(scan, fake_host());
  EXPECT_THAT(error_of<DeviceUnavailable>([&] { runtime->device("cuda:0"); }),
              HasSubstr("cuda:0 is not available: no CUDA driver (libcuda.so.1 not found)"));
}

// cpu-pinned: host memory page-locked through the driver (tests/backings_pinned_host_test.cpp has the backing).
TEST(RuntimeCudaDevices, CpuPinnedIsPageLockedWithAShareOfTheHostAsItsDefaultLimit) {
  Driver driver(fake_gpu());
  auto runtime = runtime_on(driver, quiet_config());
  plimsoll::Allocator& pinned = runtime->device("cpu-pinned");
  EXPECT_EQ(pinned.description().name, "cpu-pinned");
  EXPECT_EQ(pinned.description().hardware, "pinned host memory");
  EXPECT_EQ(pinned.description().limit_bytes, 16 * kGiB / 8) << "an eighth of the host by default";
  EXPECT_NE(&pinned, &runtime->device("cpu")) << "a device of its own";
  ASSERT_TRUE(pinned.stream_ordered());
  plimsoll::fake_cuda::Stream& copies = driver.create_stream();
  void* batch = pinned.allocate(4 * kMiB, plimsoll::Stream{copies.handle()});
  std::memset(batch, 3, 4 * kMiB);
  EXPECT_EQ(driver.registered_bytes(), pinned.stats().reserved_bytes);
  EXPECT_GE(driver.registered_bytes(), 4 * kMiB);
  pinned.deallocate(batch, plimsoll::Stream{copies.handle()});
  pinned.trim();
  EXPECT_EQ(driver.registered_bytes(), 0u);
  bool listed = false;
  for (const plimsoll::DeviceListing& row : runtime->list_devices()) {
    if (row.name != "cpu-pinned") continue;
    listed = true;
    EXPECT_EQ(row.limit_bytes, 16 * kGiB / 8);
    EXPECT_THAT(row.details, HasSubstr("cuMemHostRegister"));
  }
  EXPECT_TRUE(listed);
}

TEST(RuntimeCudaDevices, CpuPinnedTakesItsOwnLimitAndReportsOutOfMemoryByName) {
  Driver driver(fake_gpu());
  Config config = quiet_config();
  config.device_policies["cpu-pinned"].memory_limit = 64 * kMiB;
  auto runtime = runtime_on(driver, config);
  plimsoll::Allocator& pinned = runtime->device("cpu-pinned");
  EXPECT_EQ(pinned.description().limit_bytes, 64 * kMiB);
  EXPECT_THAT(error_of<plimsoll::OutOfMemory>([&] { pinned.allocate(80 * kMiB); }), HasSubstr("cpu-pinned"));
  EXPECT_EQ(driver.registered_bytes(), pinned.stats().reserved_bytes) << "nothing half-registered";
}

TEST(RuntimeCudaDevices, CpuPinnedWithoutADriverSaysWhyAndIsNotListed) {
  auto runtime = std::make_unique<Runtime>(quiet_config());
  plimsoll::GpuScan scan;
  scan.unavailable_reason = "no CUDA driver (libcuda.so.1 not found)";
  runtime->inject_hardware(scan, fake_host());
  EXPECT_THAT(error_of<DeviceUnavailable>([&] { runtime->device("cpu-pinned"); }),
              AllOf(HasSubstr("cpu-pinned is not available"), HasSubstr("cuMemHostRegister"), HasSubstr("use cpu")));
  for (const plimsoll::DeviceListing& row : runtime->list_devices()) EXPECT_NE(row.name, "cpu-pinned");
}

}  // namespace
