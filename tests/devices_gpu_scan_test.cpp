#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "devices/cuda_driver.hpp"
#include "devices/gpu_scan.hpp"
#include "plimsoll/device.hpp"

namespace plimsoll {
namespace {

namespace cu = cuda_driver;
using ::testing::AllOf;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::MatchesRegex;
using ::testing::StartsWith;

// ---- A fake driver: plain functions (the Api holds C function pointers) over one shared state. ----

struct FakeGpu {
  std::string name;
  std::size_t total = 0;
  std::size_t free = 0;
  cu::Uuid uuid{};
  std::string bus_id;
  int major = 0;
  int minor = 0;
};

struct FakeDriver {
  cu::Result init_result = cu::kSuccess;
  cu::Result count_result = cu::kSuccess;
  std::vector<FakeGpu> gpus;
  std::string failing_call;  // this call returns failure_result for failing_device
  int failing_device = -1;
  cu::Result failure_result = 2;  // CUDA_ERROR_OUT_OF_MEMORY
  int retained = 0;
  int released = 0;
  int pushed = 0;
  int popped = 0;
  int context_stack = 0;
};

FakeDriver fake;

cu::Result fails(const char* call, int device) {
  return fake.failing_call == call && fake.failing_device == device ? fake.failure_result : cu::kSuccess;
}

cu::Context context_of(cu::Device device) { return reinterpret_cast<cu::Context>(0x1000 + device); }

const cu::Api kFakeApi = [] {
  cu::Api api;
  api.init = [](unsigned int) { return fake.init_result; };
  api.device_get_count = [](int* count) {
    *count = static_cast<int>(fake.gpus.size());
    return fake.count_result;
  };
  api.device_get = [](cu::Device* device, int ordinal) {
    *device = ordinal;
    return fails("cuDeviceGet", ordinal);
  };
  api.device_get_name = [](char* name, int length, cu::Device device) {
    const std::string& text = fake.gpus[static_cast<std::size_t>(device)].name;
    const std::size_t copied = std::min(text.size(), static_cast<std::size_t>(length) - 1);
    std::memcpy(name, text.data(), copied);
    name[copied] = '\0';
    return fails("cuDeviceGetName", device);
  };
  api.device_total_mem = [](std::size_t* bytes, cu::Device device) {
    *bytes = fake.gpus[static_cast<std::size_t>(device)].total;
    return fails("cuDeviceTotalMem_v2", device);
  };
  api.device_get_uuid = [](cu::Uuid* uuid, cu::Device device) {
    *uuid = fake.gpus[static_cast<std::size_t>(device)].uuid;
    return fails("cuDeviceGetUuid", device);
  };
  api.device_get_pci_bus_id = [](char* bus_id, int length, cu::Device device) {
    const std::string& text = fake.gpus[static_cast<std::size_t>(device)].bus_id;
    std::snprintf(bus_id, static_cast<std::size_t>(length), "%s", text.c_str());
    return fails("cuDeviceGetPCIBusId", device);
  };
  api.device_get_attribute = [](int* value, int attribute, cu::Device device) {
    const FakeGpu& gpu = fake.gpus[static_cast<std::size_t>(device)];
    if (attribute == cu::kAttributeComputeCapabilityMajor) *value = gpu.major;
    else if (attribute == cu::kAttributeComputeCapabilityMinor) *value = gpu.minor;
    else return cu::Result{1};  // CUDA_ERROR_INVALID_VALUE: the scan asked for something unexpected
    return fails("cuDeviceGetAttribute", device);
  };
  api.primary_ctx_retain = [](cu::Context* context, cu::Device device) {
    if (const cu::Result result = fails("cuDevicePrimaryCtxRetain", device); result != cu::kSuccess) return result;
    *context = context_of(device);
    ++fake.retained;
    return cu::kSuccess;
  };
  api.primary_ctx_release = [](cu::Device) {
    ++fake.released;
    return cu::kSuccess;
  };
  api.ctx_push_current = [](cu::Context context) {
    const int device = static_cast<int>(reinterpret_cast<std::uintptr_t>(context) - 0x1000);
    if (const cu::Result result = fails("cuCtxPushCurrent_v2", device); result != cu::kSuccess) return result;
    ++fake.pushed;
    fake.context_stack = device + 1;
    return cu::kSuccess;
  };
  api.ctx_pop_current = [](cu::Context* context) {
    *context = context_of(fake.context_stack - 1);
    fake.context_stack = 0;
    ++fake.popped;
    return cu::kSuccess;
  };
  api.mem_get_info = [](std::size_t* free, std::size_t* total) {
    const int device = fake.context_stack - 1;
    if (device < 0) return cu::Result{201};  // CUDA_ERROR_INVALID_CONTEXT: no context was pushed
    *free = fake.gpus[static_cast<std::size_t>(device)].free;
    *total = fake.gpus[static_cast<std::size_t>(device)].total;
    return fails("cuMemGetInfo_v2", device);
  };
  api.get_error_name = [](cu::Result error, const char** name) {
    switch (error) {
      case 2: *name = "CUDA_ERROR_OUT_OF_MEMORY"; return cu::kSuccess;
      case 100: *name = "CUDA_ERROR_NO_DEVICE"; return cu::kSuccess;
      case 999: *name = "CUDA_ERROR_UNKNOWN"; return cu::kSuccess;
      default: *name = nullptr; return cu::Result{1};
    }
  };
  return api;
}();

FakeGpu h100() {
  FakeGpu gpu;
  gpu.name = "NVIDIA H100 80GB HBM3";
  gpu.total = std::size_t{85'031'714'816};
  gpu.free = std::size_t{84'500'000'000};
  const unsigned char uuid[16] = {0x89, 0x32, 0xf9, 0x37, 0x01, 0x23, 0x45, 0x67,
                                  0x89, 0xab, 0xcd, 0xef, 0x00, 0x0a, 0xb0, 0xff};
  std::memcpy(gpu.uuid.bytes, uuid, sizeof uuid);
  gpu.bus_id = "00000000:17:00.0";
  gpu.major = 9;
  gpu.minor = 0;
  return gpu;
}

FakeGpu a10() {
  FakeGpu gpu;
  gpu.name = "NVIDIA A10";
  gpu.total = std::size_t{23'836'098'560};
  gpu.free = std::size_t{1'000'000};
  gpu.uuid = cu::Uuid{};
  gpu.uuid.bytes[15] = 1;
  gpu.bus_id = "00000000:B3:00.0";
  gpu.major = 8;
  gpu.minor = 6;
  return gpu;
}

class FakeDriverScan : public ::testing::Test {
 protected:
  void SetUp() override { fake = FakeDriver{}; }
  void expect_contexts_balanced() const {
    EXPECT_EQ(fake.retained, fake.released);
    EXPECT_EQ(fake.pushed, fake.popped);
    EXPECT_EQ(fake.context_stack, 0);
  }
};

TEST_F(FakeDriverScan, DescribesEveryGpu) {
  fake.gpus = {h100(), a10()};
  const GpuScan scan = scan_gpus_with(kFakeApi);
  EXPECT_EQ(scan.unavailable_reason, "");
  ASSERT_EQ(scan.gpus.size(), 2u);

  const GpuInfo& first = scan.gpus[0];
  EXPECT_EQ(first.ordinal, 0);
  EXPECT_EQ(first.name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(first.total_bytes, 85'031'714'816u);
  EXPECT_EQ(first.free_bytes, 84'500'000'000u);
  EXPECT_EQ(first.uuid, "GPU-8932f937-0123-4567-89ab-cdef000ab0ff");
  EXPECT_EQ(first.pci_bus_id, "00000000:17:00.0");
  EXPECT_EQ(first.compute_major, 9);
  EXPECT_EQ(first.compute_minor, 0);

  const GpuInfo& second = scan.gpus[1];
  EXPECT_EQ(second.ordinal, 1);
  EXPECT_EQ(second.name, "NVIDIA A10");
  EXPECT_EQ(second.free_bytes, 1'000'000u);
  EXPECT_EQ(second.uuid, "GPU-00000000-0000-0000-0000-000000000001");
  EXPECT_EQ(second.compute_major, 8);
  EXPECT_EQ(second.compute_minor, 6);

  EXPECT_EQ(fake.retained, 2);
  expect_contexts_balanced();
}

TEST_F(FakeDriverScan, OverlongNamesAreCutNotOverrun) {
  fake.gpus = {h100()};
  fake.gpus[0].name = std::string(1000, 'x');
  const GpuScan scan = scan_gpus_with(kFakeApi);
  ASSERT_EQ(scan.gpus.size(), 1u);
  EXPECT_GT(scan.gpus[0].name.size(), 100u);
  EXPECT_LT(scan.gpus[0].name.size(), 1000u);
}

TEST_F(FakeDriverScan, NoDeviceFromInit) {
  fake.init_result = cu::kErrorNoDevice;
  const GpuScan scan = scan_gpus_with(kFakeApi);
  EXPECT_THAT(scan.gpus, IsEmpty());
  EXPECT_THAT(scan.unavailable_reason,
              AllOf(HasSubstr("sees no GPU"), HasSubstr("CUDA_ERROR_NO_DEVICE (100)"), HasSubstr("nvidia-smi")));
}

TEST_F(FakeDriverScan, InitFailureIsNamed) {
  fake.gpus = {h100()};
  fake.init_result = 999;
  const GpuScan scan = scan_gpus_with(kFakeApi);
  EXPECT_THAT(scan.gpus, IsEmpty());
  EXPECT_EQ(scan.unavailable_reason,
            "the CUDA driver failed to start (cuInit: CUDA_ERROR_UNKNOWN (999)); GPUs are not available");
}

TEST_F(FakeDriverScan, UnnamedErrorsShowTheirNumber) {
  fake.init_result = 12345;
  EXPECT_THAT(scan_gpus_with(kFakeApi).unavailable_reason, HasSubstr("CUresult 12345"));
  cu::Api without_names = kFakeApi;
  without_names.get_error_name = nullptr;
  fake.init_result = 999;
  EXPECT_THAT(scan_gpus_with(without_names).unavailable_reason, HasSubstr("cuInit: CUresult 999"));
}

TEST_F(FakeDriverScan, ZeroGpus) {
  const GpuScan scan = scan_gpus_with(kFakeApi);
  EXPECT_THAT(scan.gpus, IsEmpty());
  EXPECT_THAT(scan.unavailable_reason, HasSubstr("reports 0 GPUs"));
}

TEST_F(FakeDriverScan, CountFailure) {
  fake.gpus = {h100()};
  fake.count_result = 999;
  const GpuScan scan = scan_gpus_with(kFakeApi);
  EXPECT_THAT(scan.gpus, IsEmpty());
  EXPECT_THAT(scan.unavailable_reason, AllOf(HasSubstr("cuDeviceGetCount"), HasSubstr("CUDA_ERROR_UNKNOWN")));
}

TEST_F(FakeDriverScan, AnyFailedQueryEmptiesTheListAndSaysWhere) {
  for (const char* call : {"cuDeviceGet", "cuDeviceGetName", "cuDeviceTotalMem_v2", "cuDeviceGetUuid",
                           "cuDeviceGetPCIBusId", "cuDeviceGetAttribute", "cuDevicePrimaryCtxRetain",
                           "cuCtxPushCurrent_v2", "cuMemGetInfo_v2"}) {
    SetUp();
    fake.gpus = {h100(), a10()};
    fake.failing_call = call;
    fake.failing_device = 1;
    const GpuScan scan = scan_gpus_with(kFakeApi);
    EXPECT_THAT(scan.gpus, IsEmpty()) << call;
    EXPECT_EQ(scan.unavailable_reason,
              std::string("the CUDA driver failed to describe GPU 1 (") + call +
                  ": CUDA_ERROR_OUT_OF_MEMORY (2)); GPUs are not available")
        << call;
    expect_contexts_balanced();
  }
}

TEST_F(FakeDriverScan, FreeMemoryIsReadInsideThatGpusContext) {
  fake.gpus = {a10(), h100()};
  const GpuScan scan = scan_gpus_with(kFakeApi);
  ASSERT_EQ(scan.gpus.size(), 2u);
  EXPECT_EQ(scan.gpus[0].free_bytes, a10().free);
  EXPECT_EQ(scan.gpus[1].free_bytes, h100().free);
  expect_contexts_balanced();
}

// ---- The real driver on this machine. ----

bool driver_loads() {
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  return library != nullptr;  // left open, as the scan leaves it
}

TEST(RealGpuScan, NeverThrowsAndAlwaysExplainsAnEmptyList) {
  GpuScan scan;
  ASSERT_NO_THROW(scan = scan_gpus());
  EXPECT_EQ(scan.gpus.empty(), !scan.unavailable_reason.empty()) << scan.unavailable_reason;
}

TEST(RealGpuScan, WithoutADriverSaysSo) {
  if (driver_loads()) GTEST_SKIP() << "libcuda.so.1 is installed here";
  const GpuScan scan = scan_gpus();
  EXPECT_THAT(scan.gpus, IsEmpty());
  EXPECT_THAT(scan.unavailable_reason, AllOf(StartsWith("no CUDA driver (libcuda.so.1 not found: "),
                                             HasSubstr("libcuda.so.1"), EndsWith("); GPUs are not available")));
}

TEST(RealGpuScan, DescribesEachGpuSensibly) {
  const GpuScan scan = scan_gpus();
  if (scan.gpus.empty()) GTEST_SKIP() << "no GPU: " << scan.unavailable_reason;
  std::set<std::string> uuids;
  for (std::size_t i = 0; i < scan.gpus.size(); ++i) {
    const GpuInfo& gpu = scan.gpus[i];
    EXPECT_EQ(gpu.ordinal, static_cast<int>(i));
    EXPECT_FALSE(gpu.name.empty());
    EXPECT_GT(gpu.total_bytes, std::uint64_t{1} << 30);
    EXPECT_GT(gpu.free_bytes, 0u);
    EXPECT_LE(gpu.free_bytes, gpu.total_bytes);
    EXPECT_THAT(gpu.uuid, MatchesRegex("GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"));
    EXPECT_THAT(gpu.pci_bus_id, MatchesRegex("[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\\.[0-9a-fA-F]"));
    EXPECT_GE(gpu.compute_major, 3);
    EXPECT_GE(gpu.compute_minor, 0);
    uuids.insert(gpu.uuid);
  }
  EXPECT_EQ(uuids.size(), scan.gpus.size()) << "UUIDs must be unique";
}

TEST(RealGpuScan, ScanningAgainGivesTheSameGpus) {
  const GpuScan first = scan_gpus();
  const GpuScan second = scan_gpus();
  if (first.gpus.empty()) GTEST_SKIP() << "no GPU: " << first.unavailable_reason;
  ASSERT_EQ(first.gpus.size(), second.gpus.size());
  for (std::size_t i = 0; i < first.gpus.size(); ++i) {
    EXPECT_EQ(first.gpus[i].uuid, second.gpus[i].uuid);
    EXPECT_EQ(first.gpus[i].name, second.gpus[i].name);
    EXPECT_EQ(first.gpus[i].total_bytes, second.gpus[i].total_bytes);
  }
}

TEST(RealGpuScan, VisibilityByUuidFindsEachGpu) {
  const GpuScan scan = scan_gpus();
  if (scan.gpus.empty()) GTEST_SKIP() << "no GPU: " << scan.unavailable_reason;
  std::vector<std::string> uuids;
  for (const GpuInfo& gpu : scan.gpus) uuids.push_back(gpu.uuid);
  for (std::size_t i = 0; i < uuids.size(); ++i) {
    const Visibility visibility = resolve_visibility(uuids[i], uuids);
    ASSERT_EQ(visibility.selected.size(), 1u);
    EXPECT_EQ(visibility.selected[0], static_cast<int>(i));
  }
}

}  // namespace
}  // namespace plimsoll
