// PinnedHostBacking (src/backings/pinned_host_backing.hpp) on the fake CUDA driver: each mapped granule registered
// with cuMemHostRegister and unregistered before it is unmapped; a refused registration leaving nothing mapped or
// registered; an Allocator on top ordering reuse by streams (a buffer whose copy is queued is not handed to
// another stream); a driver without cuMemHostRegister refused with the fix.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>

#include "backings/pinned_host_backing.hpp"
#include "fake_cuda_driver.hpp"
#include "plimsoll/allocator.hpp"
#include "plimsoll/error.hpp"

namespace plimsoll::backings {
namespace {

using ::testing::HasSubstr;
constexpr std::uint64_t MiB = std::uint64_t{1} << 20;

TEST(PinnedHostBacking, RegistersEachMappedGranuleAndUnregistersBeforeUnmapping) {
  fake_cuda::Driver driver;
  PinnedHostBacking backing(driver.api(), 0, 256 * MiB);
  EXPECT_TRUE(backing.touchable());
  EXPECT_THAT(backing.describe(), HasSubstr("pinned host memory"));
  const std::uintptr_t base = backing.reserve(64 * MiB);
  ASSERT_NE(base, 0u);
  ASSERT_TRUE(backing.map(base, 6 * MiB));
  EXPECT_EQ(driver.counters().host_register, 3u) << "one registration per granule";
  EXPECT_EQ(driver.registered_bytes(), 6 * MiB);
  std::memset(reinterpret_cast<void*>(base), 7, 6 * MiB);
  backing.unmap(base + 2 * MiB, 2 * MiB);  // the middle granule alone
  EXPECT_EQ(driver.registered_bytes(), 4 * MiB);
  EXPECT_EQ(driver.counters().ctx_synchronize, 0u) << "no free without a stream: nothing to wait for";
  EXPECT_EQ(reinterpret_cast<unsigned char*>(base)[4 * MiB], 7) << "the neighbours keep their data";
  backing.unmap(base, 2 * MiB);
  backing.unmap(base + 4 * MiB, 2 * MiB);
  EXPECT_EQ(driver.registered_bytes(), 0u);
  backing.unreserve(base, 64 * MiB);
}

TEST(PinnedHostBacking, ARefusedRegistrationLeavesNothingMappedOrRegistered) {
  fake_cuda::Driver driver;
  PinnedHostBacking backing(driver.api(), 0, 256 * MiB);
  const std::uintptr_t base = backing.reserve(64 * MiB);
  driver.fail(fake_cuda::Call::host_register, 2, cuda_driver::kErrorOutOfMemory);
  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(backing.map(base, 6 * MiB));
  EXPECT_THAT(::testing::internal::GetCapturedStderr(), HasSubstr("cuMemHostRegister"));
  EXPECT_EQ(driver.registered_bytes(), 0u);
  EXPECT_EQ(backing.host_pages().committed_bytes, 0u);
  EXPECT_THAT(backing.last_driver_error(), HasSubstr("CUDA_ERROR_OUT_OF_MEMORY"));
  ASSERT_TRUE(backing.map(base, 6 * MiB)) << "the next map works";
  backing.unmap(base, 6 * MiB);
  backing.unreserve(base, 64 * MiB);
}

TEST(PinnedHostBacking, AnAllocatorOnTopKeepsABufferWhoseCopyIsQueued) {
  fake_cuda::Driver driver;
  auto backing = std::make_unique<PinnedHostBacking>(driver.api(), 0, 256 * MiB);
  DeviceDescription description;
  description.name = "cpu-pinned";
  description.hardware = "pinned host memory";
  description.limit_bytes = 32 * MiB;
  Allocator allocator(description, std::move(backing));
  ASSERT_TRUE(allocator.stream_ordered());
  fake_cuda::Stream& copies = driver.create_stream();
  fake_cuda::Stream& other = driver.create_stream();
  void* batch = allocator.allocate(4 * MiB, Stream{copies.handle()});
  std::memset(batch, 1, 4 * MiB);  // host memory: the program writes the batch
  copies.hold();
  copies.launch();  // the host-to-device copy of the batch is queued
  allocator.deallocate(batch, Stream{copies.handle()});
  EXPECT_NE(allocator.allocate(4 * MiB, Stream{other.handle()}), batch) << "overwritten while being copied";
  copies.release();
  EXPECT_EQ(allocator.allocate(4 * MiB, Stream{other.handle()}), batch);
  EXPECT_EQ(driver.registered_bytes(), allocator.stats().reserved_bytes);
}

TEST(PinnedHostBacking, ADriverWithoutHostRegisterIsRefusedWithTheFix) {
  fake_cuda::Driver driver;
  cuda_driver::Api api = driver.api();
  api.mem_host_register = nullptr;
  try {
    PinnedHostBacking backing(api, 0, 256 * MiB);
    FAIL() << "built without cuMemHostRegister";
  } catch (const DeviceUnavailable& error) {
    EXPECT_THAT(error.what(), HasSubstr("cuMemHostRegister"));
    EXPECT_THAT(error.what(), HasSubstr("update the NVIDIA driver"));
  }
}

}  // namespace
}  // namespace plimsoll::backings
