// Pause and resume over the CUDA VMM backing on the fake driver (tests/fake_cuda_driver.hpp, whose device memory is
// real memfd memory): the contents copied out through cuMemcpyDtoH and back through cuMemcpyHtoD, the addresses
// unchanged, the driver holding nothing while paused, another allocator on the same GPU using the memory meanwhile,
// and a resume refused by the driver that leaves the device paused, its contents kept, and resumable.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>

#include "backings/cuda_vmm_backing.hpp"
#include "fake_cuda_driver.hpp"
#include "plimsoll/allocator.hpp"
#include "plimsoll/error.hpp"

namespace plimsoll::backings {
namespace {

using ::testing::HasSubstr;
constexpr std::uint64_t MiB = std::uint64_t{1} << 20;

std::unique_ptr<Allocator> allocator_over(const fake_cuda::Driver& driver, std::uint64_t limit) {
  DeviceDescription description;
  description.name = "cuda:0";
  description.hardware = "Fake GPU (memfd)";
  description.limit_bytes = limit;
  description.total_bytes = limit;
  return std::make_unique<Allocator>(description, std::make_unique<CudaVmmBacking>(driver.api(), 0));
}

void fill(void* memory, std::size_t bytes, unsigned char seed) {
  auto* data = static_cast<unsigned char*>(memory);
  for (std::size_t i = 0; i < bytes; ++i) data[i] = static_cast<unsigned char>(seed + (i >> 3));
}
bool holds(const void* memory, std::size_t bytes, unsigned char seed) {
  const auto* data = static_cast<const unsigned char*>(memory);
  for (std::size_t i = 0; i < bytes; ++i)
    if (data[i] != static_cast<unsigned char>(seed + (i >> 3))) return false;
  return true;
}

TEST(CudaVmmPause, ContentsComeBackAtTheSameAddressesThroughTheDriversCopies) {
  fake_cuda::Driver driver;  // 64 MiB
  auto gpu = allocator_over(driver, 48 * MiB);
  void* weights = gpu->allocate(10 * MiB + 300, "weights");
  void* small = gpu->allocate(4000, "activations");
  fill(weights, 10 * MiB + 300, 1);
  fill(small, 4000, 77);
  const std::uint64_t syncs = driver.counters().ctx_synchronize;

  const std::uint64_t unmapped = gpu->pause(PauseOptions{.keep_contents = true});
  EXPECT_GE(unmapped, 12 * MiB);
  EXPECT_EQ(driver.mapped_bytes(), 0u);
  EXPECT_EQ(driver.used_bytes(), 0u) << "every granule released to the device";
  EXPECT_GT(driver.counters().copies, 0u);
  EXPECT_GT(driver.counters().ctx_synchronize, syncs) << "queued work finishes before the copy and the unmap";
  EXPECT_EQ(driver.reservations(), 1u) << "the address space stays reserved";
  EXPECT_TRUE(gpu->paused());

  gpu->resume();
  EXPECT_EQ(driver.mapped_bytes(), unmapped);
  EXPECT_TRUE(holds(weights, 10 * MiB + 300, 1));
  EXPECT_TRUE(holds(small, 4000, 77));
  EXPECT_EQ(gpu->stats().reserved_bytes, driver.mapped_bytes());
  gpu->deallocate(weights);
  gpu->deallocate(small);
}

TEST(CudaVmmPause, AnotherAllocatorUsesTheMemoryMeanwhileAndAFailedResumeLosesNothing) {
  fake_cuda::Driver driver;  // 64 MiB, shared by two allocators: two jobs on one GPU
  auto first = allocator_over(driver, 48 * MiB);
  void* state = first->allocate(40 * MiB);
  fill(state, 40 * MiB, 9);
  first->pause(PauseOptions{.keep_contents = true});

  auto second = allocator_over(driver, 48 * MiB);
  void* borrowed = second->allocate(40 * MiB);  // fits only because the first gave its memory back
  fill(borrowed, 40 * MiB, 4);
  try {
    first->resume();
    FAIL() << "the device has no room for the first job's memory";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("cannot resume cuda:0"));
    EXPECT_THAT(e.what(), HasSubstr("stays paused with nothing lost (its contents are kept in host memory)"));
  }
  EXPECT_TRUE(first->paused());
  EXPECT_EQ(driver.mapped_bytes(), second->stats().reserved_bytes) << "the failed resume left nothing mapped";

  second->deallocate(borrowed);
  second->trim();
  first->resume();
  EXPECT_TRUE(holds(state, 40 * MiB, 9));
  first->deallocate(state);
}

}  // namespace
}  // namespace plimsoll::backings
