// The CUDA backings over the fake driver (tests/fake_cuda_driver.hpp: memfd + mmap stand in for cuMemCreate and
// cuMemMap, so mapped memory is real and can be written): one allocation per granule, the driver's refusal of
// partial unmaps, all-or-nothing maps when the device runs out midway, trim giving granules back, the probe and
// the plain fallback, and Allocator on top with the driver's mapped bytes equal to the heap's reserved bytes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "backings/cuda_backing.hpp"
#include "backings/cuda_region_backing.hpp"
#include "backings/cuda_vmm_backing.hpp"
#include "fake_cuda_driver.hpp"
#include "plimsoll/allocator.hpp"
#include "plimsoll/error.hpp"
#include "plimsoll/oom.hpp"

namespace plimsoll::backings {
namespace {

namespace cu = cuda_driver;
using ::testing::HasSubstr;
constexpr std::uint64_t MiB = std::uint64_t{1} << 20;

fake_cuda::Options with_capacity(std::uint64_t bytes) {
  fake_cuda::Options options;
  options.capacity_bytes = bytes;
  return options;
}

void* pointer(std::uintptr_t addr) { return reinterpret_cast<void*>(addr); }

/// Writes `bytes` of a pattern derived from `seed`, then reads it back.
bool write_and_check(void* memory, std::size_t bytes, unsigned char seed) {
  auto* data = static_cast<unsigned char*>(memory);
  for (std::size_t i = 0; i < bytes; i += 4096) data[i] = static_cast<unsigned char>(seed + i / 4096);
  data[bytes - 1] = seed;
  for (std::size_t i = 0; i < bytes; i += 4096)
    if (data[i] != static_cast<unsigned char>(seed + i / 4096) && i != bytes - 1) return false;
  return data[bytes - 1] == seed;
}

std::unique_ptr<Allocator> allocator_over(std::unique_ptr<Backing> backing, std::uint64_t limit,
                                          Growth growth = Growth::on_demand) {
  DeviceDescription description;
  description.name = "cuda:0";
  description.hardware = "Fake GPU (memfd)";
  description.policy.growth = growth;
  description.limit_bytes = limit;
  description.total_bytes = backing->memory().total_bytes;
  return std::make_unique<Allocator>(description, std::move(backing));
}

// ---- the probe ----

TEST(CudaVmmProbe, SupportedWhenEntryPointsAndAttributeAreThere) {
  fake_cuda::Driver driver;
  EXPECT_EQ(cu::vmm_unsupported_reason(driver.api(), 0), "");
  EXPECT_TRUE(driver.api().has_vmm());
  EXPECT_TRUE(driver.api().has_plain_memory());
  EXPECT_TRUE(driver.api().has_events());
}

TEST(CudaVmmProbe, AttributeZeroMeansNoVmmAndTheBackingRefuses) {
  fake_cuda::Options options;
  options.vmm_supported = false;
  fake_cuda::Driver driver(options);
  EXPECT_THAT(cu::vmm_unsupported_reason(driver.api(), 0),
              HasSubstr("CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED is 0"));
  try {
    CudaVmmBacking backing(driver.api(), 0);
    FAIL() << "a device without VMM must be refused";
  } catch (const DeviceUnavailable& error) {
    EXPECT_THAT(error.what(), HasSubstr("cannot grow its memory in place"));
  }
  EXPECT_NO_THROW(CudaRegionBacking(driver.api(), 0)) << "the plain fallback still works";
}

TEST(CudaVmmProbe, MissingEntryPointsMeanNoVmm) {
  fake_cuda::Options options;
  options.vmm_entry_points = false;
  fake_cuda::Driver driver(options);
  EXPECT_FALSE(driver.api().has_vmm());
  EXPECT_THAT(cu::vmm_unsupported_reason(driver.api(), 0), HasSubstr("no virtual memory management"));
  EXPECT_THROW(CudaVmmBacking(driver.api(), 0), DeviceUnavailable);
}

TEST(CudaVmmProbe, GranularityIsTheRecommendedOneButNeverBelowTheMinimum) {
  {
    fake_cuda::Options options;
    options.recommended_granularity = 8 * MiB;
    fake_cuda::Driver driver(options);
    EXPECT_EQ(CudaVmmBacking(driver.api(), 0).granularity(), 8 * MiB);
  }
  {
    fake_cuda::Options options;
    options.minimum_granularity = 4 * MiB;
    options.recommended_granularity = 2 * MiB;
    fake_cuda::Driver driver(options);
    EXPECT_EQ(CudaVmmBacking(driver.api(), 0).granularity(), 4 * MiB);
  }
}

TEST(CudaBackingChoice, GrowableWhereVmmWorksPlainRegionsElse) {
  {
    fake_cuda::Driver driver;
    const CudaBackingChoice choice = make_cuda_backing(driver.api(), 0);
    EXPECT_TRUE(choice.growable);
    EXPECT_EQ(choice.fallback_reason, "");
    EXPECT_NE(dynamic_cast<CudaVmmBacking*>(choice.backing.get()), nullptr);
  }
  for (const bool entry_points : {true, false}) {
    fake_cuda::Options options;
    options.vmm_supported = false;
    options.vmm_entry_points = entry_points;
    fake_cuda::Driver driver(options);
    const CudaBackingChoice choice = make_cuda_backing(driver.api(), 0);
    EXPECT_FALSE(choice.growable);
    EXPECT_THAT(choice.fallback_reason, HasSubstr("virtual memory management"));
    EXPECT_NE(dynamic_cast<CudaRegionBacking*>(choice.backing.get()), nullptr);
    EXPECT_THAT(choice.backing->describe(), HasSubstr("cuMemAlloc"));
  }
}

// ---- the fake driver itself behaves as cuda.h says ----

TEST(FakeCudaDriver, UnmapOfPartOfAMappingFailsWithInvalidValue) {
  fake_cuda::Driver driver;
  const cu::Api& api = driver.api();
  cu::DevicePtr base = 0;
  ASSERT_EQ(api.mem_address_reserve(&base, 8 * MiB, 2 * MiB, 0, 0), cu::kSuccess);
  const cu::MemAllocationProp prop = cu::device_allocation_prop(0);
  cu::MemHandle handle = 0;
  ASSERT_EQ(api.mem_create(&handle, 4 * MiB, &prop, 0), cu::kSuccess);
  ASSERT_EQ(api.mem_map(base, 4 * MiB, 0, handle, 0), cu::kSuccess);
  EXPECT_EQ(api.mem_map(base + 2 * MiB, 2 * MiB, 0, handle, 0), cu::kErrorInvalidValue) << "already mapped";
  const cu::MemAccessDesc access{.location = prop.location, .flags = cu::kMemAccessProtReadWrite};
  EXPECT_EQ(api.mem_set_access(base, 2 * MiB, &access, 1), cu::kErrorInvalidValue) << "part of a mapping";
  ASSERT_EQ(api.mem_set_access(base, 4 * MiB, &access, 1), cu::kSuccess);
  EXPECT_TRUE(write_and_check(pointer(base), 4 * MiB, 7));

  EXPECT_EQ(api.mem_unmap(base, 2 * MiB), cu::kErrorInvalidValue) << "the first half of a mapping";
  EXPECT_EQ(api.mem_unmap(base + 2 * MiB, 2 * MiB), cu::kErrorInvalidValue) << "the second half";
  EXPECT_EQ(api.mem_unmap(base, 8 * MiB), cu::kErrorInvalidValue) << "more than the mapping";
  EXPECT_EQ(driver.mapped_bytes(), 4 * MiB) << "a refused unmap changes nothing";
  EXPECT_EQ(api.mem_address_free(base, 8 * MiB), cu::kErrorInvalidValue) << "still mapped inside";

  EXPECT_EQ(api.mem_release(handle), cu::kSuccess);
  EXPECT_EQ(driver.used_bytes(), 4 * MiB) << "released but still mapped: the memory stays";
  EXPECT_EQ(api.mem_unmap(base, 4 * MiB), cu::kSuccess);
  EXPECT_EQ(driver.used_bytes(), 0U) << "unmapped and released: the memory goes back";
  EXPECT_EQ(driver.live_allocations(), 0U);
  EXPECT_EQ(api.mem_release(handle), fake_cuda::kErrorInvalidHandle) << "a double release";
  EXPECT_EQ(api.mem_address_free(base, 8 * MiB), cu::kSuccess);
}

TEST(FakeCudaDriver, CreateFailsWithOutOfMemoryPastTheCapacity) {
  fake_cuda::Driver driver(with_capacity(4 * MiB));
  const cu::MemAllocationProp prop = cu::device_allocation_prop(0);
  cu::MemHandle first = 0;
  cu::MemHandle second = 0;
  cu::MemHandle third = 0;
  EXPECT_EQ(driver.api().mem_create(&first, 2 * MiB, &prop, 0), cu::kSuccess);
  EXPECT_EQ(driver.api().mem_create(&second, 2 * MiB, &prop, 0), cu::kSuccess);
  EXPECT_EQ(driver.api().mem_create(&third, 2 * MiB, &prop, 0), cu::kErrorOutOfMemory);
  EXPECT_EQ(driver.api().mem_create(&third, 1 * MiB, &prop, 0), cu::kErrorInvalidValue) << "below the granularity";
  EXPECT_EQ(driver.api().mem_release(first), cu::kSuccess);
  EXPECT_EQ(driver.api().mem_create(&third, 2 * MiB, &prop, 0), cu::kSuccess) << "the release made room";
  driver.api().mem_release(second);
  driver.api().mem_release(third);
}

// ---- CudaVmmBacking ----

TEST(CudaVmmBacking, MapsEachGranuleAsItsOwnAllocationAndUnmapsAnyGrouping) {
  fake_cuda::Driver driver;
  {
    CudaVmmBacking backing(driver.api(), 0);
    EXPECT_EQ(backing.granularity(), 2 * MiB);
    EXPECT_FALSE(backing.touchable());
    const std::uintptr_t base = backing.reserve(32 * MiB);
    ASSERT_NE(base, 0U);
    EXPECT_EQ(base % (2 * MiB), 0U);

    ASSERT_TRUE(backing.map(base, 6 * MiB));
    fake_cuda::Counters counters = driver.counters();
    EXPECT_EQ(counters.create, 3U);
    EXPECT_EQ(counters.map, 3U);
    EXPECT_EQ(counters.set_access, 3U);
    EXPECT_EQ(driver.mapped_bytes(), 6 * MiB);
    EXPECT_EQ(backing.mapped_bytes(), 6 * MiB);
    EXPECT_TRUE(write_and_check(pointer(base), 6 * MiB, 1)) << "mapped memory is readable and writable";

    // The middle granule of one map() call: possible only because each granule is its own mapping. A block was
    // freed without its streams: the device's work is waited for before memory goes.
    ASSERT_NE(backing.stream_events(), nullptr);
    backing.stream_events()->note_unordered_free();
    backing.unmap(base + 2 * MiB, 2 * MiB);
    counters = driver.counters();
    EXPECT_EQ(counters.unmap, 1U);
    EXPECT_EQ(counters.release, 1U);
    EXPECT_EQ(counters.ctx_synchronize, 1U) << "streams are drained before memory goes";
    EXPECT_EQ(driver.mapped_bytes(), 4 * MiB);
    EXPECT_EQ(static_cast<unsigned char*>(pointer(base))[0], 1) << "the neighbours keep their data";
    EXPECT_EQ(static_cast<unsigned char*>(pointer(base + 4 * MiB))[0], static_cast<unsigned char>(1 + 1024));

    ASSERT_TRUE(backing.map(base + 2 * MiB, 2 * MiB));
    EXPECT_EQ(static_cast<unsigned char*>(pointer(base + 2 * MiB))[0], 0) << "a fresh granule, not the old one";
    backing.unmap(base, 6 * MiB);  // spans granules mapped by separate calls
    counters = driver.counters();
    EXPECT_EQ(counters.unmap, 4U);
    EXPECT_EQ(counters.release, 4U);
    EXPECT_EQ(driver.mapped_bytes(), 0U);
    EXPECT_EQ(driver.used_bytes(), 0U);

    EXPECT_THROW(backing.map(base + 1 * MiB, 2 * MiB), std::logic_error) << "misaligned";
    EXPECT_THROW(backing.map(base + 32 * MiB, 2 * MiB), std::logic_error) << "outside the reservation";
    backing.unreserve(base, 32 * MiB);
    EXPECT_EQ(driver.reservations(), 0U);
  }
  const fake_cuda::Counters counters = driver.counters();
  EXPECT_EQ(counters.ctx_push, counters.ctx_pop) << "every context pushed is popped";
  EXPECT_EQ(counters.primary_retain, counters.primary_release);
}

TEST(CudaVmmBacking, RunningOutMidwayUnmapsWhatTheCallMapped) {
  fake_cuda::Driver driver(with_capacity(8 * MiB));
  CudaVmmBacking backing(driver.api(), 0);
  const std::uintptr_t base = backing.reserve(32 * MiB);
  ASSERT_TRUE(backing.map(base, 4 * MiB));
  const fake_cuda::Counters before = driver.counters();

  EXPECT_FALSE(backing.map(base + 8 * MiB, 8 * MiB)) << "2 of 4 granules fit";
  const fake_cuda::Counters after = driver.counters();
  EXPECT_EQ(after.create - before.create, 3U) << "the third cuMemCreate ran out";
  EXPECT_EQ(after.map - before.map, 2U);
  EXPECT_EQ(after.unmap - before.unmap, 2U) << "the two granules mapped before were unmapped";
  EXPECT_EQ(after.release - before.release, 2U) << "...and released";
  EXPECT_EQ(after.ctx_synchronize, before.ctx_synchronize) << "fresh granules need no wait";
  EXPECT_EQ(driver.mapped_bytes(), 4 * MiB);
  EXPECT_EQ(driver.used_bytes(), 4 * MiB);
  EXPECT_EQ(backing.mapped_bytes(), 4 * MiB);
  EXPECT_EQ(backing.memory().free_bytes, 4 * MiB);

  EXPECT_TRUE(backing.map(base + 8 * MiB, 4 * MiB)) << "nothing leaked: the rest of the device is usable";
  backing.unmap(base, 4 * MiB);
  backing.unmap(base + 8 * MiB, 4 * MiB);
  backing.unreserve(base, 32 * MiB);
}

TEST(CudaVmmBacking, OtherDriverFailuresRollBackAndAreKeptForTheReport) {
  fake_cuda::Driver driver;
  CudaVmmBacking backing(driver.api(), 0);
  const std::uintptr_t base = backing.reserve(32 * MiB);
  EXPECT_EQ(backing.last_driver_error(), "");

  driver.fail(fake_cuda::Call::set_access, 3, cu::kErrorInvalidValue);
  EXPECT_FALSE(backing.map(base, 8 * MiB));
  EXPECT_THAT(backing.last_driver_error(), HasSubstr("cuMemSetAccess"));
  EXPECT_THAT(backing.last_driver_error(), HasSubstr("CUDA_ERROR_INVALID_VALUE"));
  EXPECT_EQ(driver.mapped_bytes(), 0U);
  EXPECT_EQ(driver.live_allocations(), 0U) << "the failing granule's own allocation was released too";

  driver.fail(fake_cuda::Call::map, 2, fake_cuda::kErrorInvalidHandle);
  EXPECT_FALSE(backing.map(base, 8 * MiB));
  EXPECT_THAT(backing.last_driver_error(), HasSubstr("cuMemMap"));
  EXPECT_EQ(driver.mapped_bytes(), 0U);
  EXPECT_EQ(driver.live_allocations(), 0U);

  ASSERT_TRUE(backing.map(base, 8 * MiB)) << "the backing's books stayed right";
  backing.unmap(base, 8 * MiB);
  backing.unreserve(base, 32 * MiB);
}

TEST(CudaVmmAllocator, ADriverFailureBecomesACleanOutOfMemory) {
  fake_cuda::Driver driver;
  auto allocator = allocator_over(std::make_unique<CudaVmmBacking>(driver.api(), 0), 32 * MiB);
  // Every cuMemCreate fails (a sticky error, as after a kernel fault), through the heap's retry too.
  driver.fail(fake_cuda::Call::create, 1, fake_cuda::kErrorInvalidContext, 1000);
  EXPECT_EQ(allocator->try_allocate(4 * MiB), nullptr) << "noexcept: no exception may escape the backing";
  EXPECT_THROW(allocator->allocate(4 * MiB), OutOfMemory);
  EXPECT_EQ(driver.mapped_bytes(), 0U);
  EXPECT_EQ(driver.live_allocations(), 0U);
  driver.fail(fake_cuda::Call::create, 0, cu::kSuccess);
  void* block = allocator->allocate(4 * MiB);
  EXPECT_EQ(driver.mapped_bytes(), allocator->stats().reserved_bytes);
  allocator->deallocate(block);
}

TEST(CudaVmmBackingDeathTest, WrongCallsAndFailedUnmapsAbortSayingWhy) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  fake_cuda::Driver driver;
  CudaVmmBacking backing(driver.api(), 0);
  const std::uintptr_t base = backing.reserve(16 * MiB);
  ASSERT_TRUE(backing.map(base, 4 * MiB));
  EXPECT_DEATH(backing.unmap(base + 4 * MiB, 2 * MiB), "not mapped");
  EXPECT_DEATH(backing.unreserve(base, 16 * MiB), "still mapped");
  // Each death runs in a child process, so the parent's injected failure stays armed; it is cleared below.
  driver.fail(fake_cuda::Call::unmap, 1, cu::kErrorInvalidValue);
  EXPECT_DEATH(backing.unmap(base, 2 * MiB), "cannot recover: cuMemUnmap/cuMemRelease .*CUDA_ERROR_INVALID_VALUE");
  driver.fail(fake_cuda::Call::unmap, 0, cu::kSuccess);
  backing.unmap(base, 4 * MiB);
  backing.unreserve(base, 16 * MiB);
}

TEST(CudaVmmBacking, MemoryIsWhatTheDriverReports) {
  fake_cuda::Driver driver(with_capacity(16 * MiB));
  CudaVmmBacking backing(driver.api(), 0);
  EXPECT_EQ(backing.memory().total_bytes, 16 * MiB);
  EXPECT_EQ(backing.memory().free_bytes, 16 * MiB);
  const std::uintptr_t base = backing.reserve(16 * MiB);
  ASSERT_TRUE(backing.map(base, 6 * MiB));
  EXPECT_EQ(backing.memory().free_bytes, 10 * MiB);
  EXPECT_THAT(backing.describe(), HasSubstr("virtual memory"));
  backing.unmap(base, 6 * MiB);
  backing.unreserve(base, 16 * MiB);
}

TEST(CudaVmmBacking, DestructorGivesBackWhatWasLeft) {
  fake_cuda::Driver driver;
  {
    CudaVmmBacking backing(driver.api(), 0);
    const std::uintptr_t base = backing.reserve(16 * MiB);
    ASSERT_TRUE(backing.map(base, 4 * MiB));
  }
  EXPECT_EQ(driver.mapped_bytes(), 0U);
  EXPECT_EQ(driver.used_bytes(), 0U);
  EXPECT_EQ(driver.reservations(), 0U);
}

// ---- Allocator over the VMM backing ----

TEST(CudaVmmAllocator, AllocationsAreRealMemoryAndTrimReleasesGranules) {
  fake_cuda::Driver driver(with_capacity(64 * MiB));
  auto allocator = allocator_over(std::make_unique<CudaVmmBacking>(driver.api(), 0), 32 * MiB);
  void* big = allocator->allocate(5 * MiB + 100, "weights");
  void* small = allocator->allocate(1000, "activations");
  EXPECT_TRUE(write_and_check(big, 5 * MiB + 100, 3));
  EXPECT_TRUE(write_and_check(small, 1000, 9));
  EXPECT_EQ(driver.mapped_bytes(), allocator->stats().reserved_bytes);
  EXPECT_GE(driver.mapped_bytes(), 6 * MiB);

  allocator->deallocate(big);
  allocator->deallocate(small);
  const std::uint64_t mapped = driver.mapped_bytes();
  const std::uint64_t releases_before = driver.counters().release;
  EXPECT_EQ(allocator->trim(), mapped);
  EXPECT_EQ(driver.counters().release - releases_before, mapped / (2 * MiB)) << "one cuMemRelease per granule";
  EXPECT_EQ(driver.mapped_bytes(), 0U);
  EXPECT_EQ(driver.used_bytes(), 0U);
  EXPECT_EQ(allocator->stats().reserved_bytes, 0U);

  allocator.reset();
  EXPECT_EQ(driver.reservations(), 0U) << "the heap's reservation is freed with it";
}

TEST(CudaVmmAllocator, DeviceOutOfMemoryRetriesAfterReleasingCacheThenReports) {
  fake_cuda::Driver driver(with_capacity(8 * MiB));
  auto allocator = allocator_over(std::make_unique<CudaVmmBacking>(driver.api(), 0), 64 * MiB);
  void* first = allocator->allocate(4 * MiB);
  void* second = allocator->allocate(2 * MiB);
  allocator->deallocate(first);  // 4 MiB cached below `second`
  // Needs granules above `second`: the device is full until the cached ones are unmapped, then it fits.
  void* third = allocator->allocate(6 * MiB);
  EXPECT_GT(driver.counters().create_out_of_memory, 0U) << "the first attempt found the device full";
  EXPECT_GT(allocator->stats().unmaps, 0U) << "...so the heap gave its cached granules back and retried";
  EXPECT_TRUE(write_and_check(third, 6 * MiB, 5));
  EXPECT_EQ(driver.mapped_bytes(), allocator->stats().reserved_bytes);
  EXPECT_LE(driver.used_bytes(), 8 * MiB);

  EXPECT_THROW(allocator->allocate(4 * MiB), OutOfMemory) << "live data fills the device";
  EXPECT_EQ(driver.mapped_bytes(), allocator->stats().reserved_bytes) << "a failed map leaves nothing behind";
  allocator->deallocate(second);
  allocator->deallocate(third);
}

TEST(CudaVmmAllocator, PreallocateMapsTheWholeBudgetOnce) {
  fake_cuda::Driver driver(with_capacity(64 * MiB));
  auto allocator = allocator_over(std::make_unique<CudaVmmBacking>(driver.api(), 0), 16 * MiB, Growth::preallocate);
  EXPECT_EQ(driver.mapped_bytes(), 16 * MiB);
  EXPECT_EQ(driver.counters().create, 8U);
  void* block = allocator->allocate(15 * MiB);
  EXPECT_TRUE(write_and_check(block, 15 * MiB, 2));
  allocator->deallocate(block);
  EXPECT_EQ(allocator->trim(), 0U) << "preallocate keeps its budget";
  allocator.reset();
  EXPECT_EQ(driver.used_bytes(), 0U);
}

TEST(CudaVmmAllocator, RandomWorkloadKeepsDriverMappedBytesEqualToHeapReservedBytes) {
  // The device (48 MiB) is smaller than the limit (64 MiB), so both refuse: the heap at its limit, and the
  // driver midway through multi-granule maps, which must roll back.
  fake_cuda::Driver driver(with_capacity(48 * MiB));
  auto allocator = allocator_over(std::make_unique<CudaVmmBacking>(driver.api(), 0), 64 * MiB);
  std::mt19937_64 random(20261123);
  struct Live {
    unsigned char* data;
    std::size_t bytes;
    unsigned char mark;
  };
  std::vector<Live> live;
  std::uint64_t failures = 0;
  for (int op = 0; op < 20000; ++op) {
    const std::uint64_t dice = random() % 100;
    if (dice < 55 || live.empty()) {
      // Mostly small, some large: sizes from 1 byte to 12 MiB, log-uniform.
      const std::size_t bytes = std::size_t{1} << (random() % 24);
      const std::size_t size = bytes + random() % bytes;
      auto* data = static_cast<unsigned char*>(allocator->try_allocate(size));
      if (data == nullptr) {
        ++failures;
      } else {
        const auto mark = static_cast<unsigned char>(random());
        data[0] = mark;
        data[size - 1] = mark;
        live.push_back({data, size, mark});
      }
    } else if (dice < 98) {
      const std::size_t index = random() % live.size();
      ASSERT_EQ(live[index].data[0], live[index].mark) << "op " << op << ": memory changed under a live block";
      ASSERT_EQ(live[index].data[live[index].bytes - 1], live[index].mark) << "op " << op;
      allocator->deallocate(live[index].data);
      live[index] = live.back();
      live.pop_back();
    } else {
      allocator->trim();
    }
    ASSERT_EQ(driver.mapped_bytes(), allocator->usage().reserved_bytes) << "after op " << op;
    ASSERT_EQ(driver.used_bytes(), driver.mapped_bytes()) << "after op " << op << ": no allocation outlives its map";
    ASSERT_LE(driver.mapped_bytes(), 48 * MiB) << "the device caps what is mapped";
  }
  for (const Live& block : live) {
    ASSERT_EQ(block.data[0], block.mark);
    allocator->deallocate(block.data);
  }
  allocator->trim();
  EXPECT_EQ(driver.mapped_bytes(), 0U);
  EXPECT_EQ(driver.used_bytes(), 0U);
  const fake_cuda::Counters counters = driver.counters();
  std::printf("random workload: %llu allocation failures, %llu granules created, %llu refused for capacity\n",
              static_cast<unsigned long long>(failures), static_cast<unsigned long long>(counters.create),
              static_cast<unsigned long long>(counters.create_out_of_memory));
  EXPECT_GT(counters.create_out_of_memory, 0U) << "the workload reached the device's capacity";
  EXPECT_EQ(counters.create - counters.create_out_of_memory, counters.release)
      << "every granule created was released";
  EXPECT_EQ(counters.map, counters.unmap);
}

// ---- CudaRegionBacking: the fallback ----

TEST(CudaRegionBacking, ReserveAllocatesEverythingAndMapOnlyKeepsBooks) {
  fake_cuda::Driver driver(with_capacity(64 * MiB));
  {
    CudaRegionBacking backing(driver.api(), 0);
    const std::uintptr_t base = backing.reserve(16 * MiB);
    ASSERT_NE(base, 0U);
    EXPECT_EQ(base % (2 * MiB), 0U);
    EXPECT_EQ(driver.used_bytes(), 16 * MiB) << "all of it at once";
    EXPECT_TRUE(backing.map(base, 4 * MiB));
    EXPECT_TRUE(write_and_check(pointer(base), 4 * MiB, 4));
    EXPECT_THROW(backing.map(base + 2 * MiB, 2 * MiB), std::logic_error) << "already mapped";
    backing.unmap(base, 4 * MiB);
    EXPECT_EQ(driver.used_bytes(), 16 * MiB) << "cudaMalloc'd memory is not given back in parts";
    EXPECT_EQ(backing.reserve(64 * MiB), 0U) << "the device cannot hold it";
    backing.unreserve(base, 16 * MiB);
    EXPECT_EQ(driver.used_bytes(), 0U);
    EXPECT_EQ(driver.counters().ctx_synchronize, 1U) << "cuMemFree waits for the streams first";
  }
  const fake_cuda::Counters counters = driver.counters();
  EXPECT_EQ(counters.ctx_push, counters.ctx_pop);
}

// A refused cuMemAlloc is out of memory to the heap; a failure other than out of memory is kept for the report, as
// the VMM and pinned-host backings keep theirs (CudaLeafLocks: the same error note, the same fork order).
TEST(CudaRegionBacking, DriverFailuresOtherThanOutOfMemoryAreKeptForTheReport) {
  fake_cuda::Driver driver(with_capacity(64 * MiB));
  CudaRegionBacking backing(driver.api(), 0);
  EXPECT_EQ(backing.reserve(128 * MiB), 0U) << "the device cannot hold it";
  EXPECT_EQ(backing.last_driver_error(), "") << "out of memory is reported as such, not kept";
  driver.fail(fake_cuda::Call::mem_alloc, 1, cu::kErrorInvalidValue);
  EXPECT_EQ(backing.reserve(8 * MiB), 0U);
  EXPECT_THAT(backing.last_driver_error(), HasSubstr("cuMemAlloc of 8.00 MiB failed"));
  EXPECT_THAT(backing.last_driver_error(), HasSubstr("CUDA_ERROR_INVALID_VALUE"));
  EXPECT_EQ(driver.used_bytes(), 0U);
  const std::uintptr_t base = backing.reserve(8 * MiB);
  ASSERT_NE(base, 0U) << "the next reserve works";
  backing.unreserve(base, 8 * MiB);
  EXPECT_EQ(driver.used_bytes(), 0U);
}

TEST(CudaRegionBacking, MisalignedAllocationIsRedoneWithSlack) {
  fake_cuda::Options options;
  options.misalign_plain_allocations = true;
  fake_cuda::Driver driver(options);
  CudaRegionBacking backing(driver.api(), 0);
  const std::uintptr_t base = backing.reserve(8 * MiB);
  ASSERT_NE(base, 0U);
  EXPECT_EQ(base % (2 * MiB), 0U);
  EXPECT_EQ(driver.counters().mem_alloc, 2U);
  EXPECT_EQ(driver.counters().mem_free, 1U);
  ASSERT_TRUE(backing.map(base, 8 * MiB));
  EXPECT_TRUE(write_and_check(pointer(base), 8 * MiB, 6)) << "the aligned range lies inside the allocation";
  backing.unmap(base, 8 * MiB);
  backing.unreserve(base, 8 * MiB);
  EXPECT_EQ(driver.used_bytes(), 0U);
}

TEST(CudaRegionAllocator, PreallocateWorksAndOnDemandIsRefusedAtCreation) {
  fake_cuda::Options options = with_capacity(64 * MiB);
  options.vmm_supported = false;
  fake_cuda::Driver driver(options);
  auto allocator =
      allocator_over(std::make_unique<CudaRegionBacking>(driver.api(), 0), 16 * MiB, Growth::preallocate);
  void* block = allocator->allocate(10 * MiB);
  EXPECT_TRUE(write_and_check(block, 10 * MiB, 8));
  allocator->deallocate(block);
  allocator.reset();
  EXPECT_EQ(driver.used_bytes(), 0U);

  // on_demand reserves 4x its limit up front: on plain memory that is 4x the memory.
  EXPECT_THROW(allocator_over(std::make_unique<CudaRegionBacking>(driver.api(), 0), 32 * MiB), Error);
  EXPECT_EQ(driver.used_bytes(), 0U);
}

}  // namespace
}  // namespace plimsoll::backings
