// Pause and resume against the REAL CUDA driver (label gpu; skips, saying why, without libcuda.so.1 or a GPU, so it
// always builds and runs in CI): a pattern written into device memory through cuMemcpyHtoD comes back at the same
// addresses after a pause keeping the contents, the driver's free memory grows by what the pause gave back while
// paused, and a second allocator on the same GPU can use it meanwhile.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backings/cuda_vmm_backing.hpp"
#include "devices/cuda_driver.hpp"
#include "plimsoll/allocator.hpp"

namespace plimsoll {
namespace {

namespace cu = cuda_driver;
constexpr std::uint64_t MiB = std::uint64_t{1} << 20;

std::unique_ptr<Allocator> vmm_allocator(const cu::Api& api, std::uint64_t limit) {
  DeviceDescription description;
  description.name = "cuda:0";
  description.hardware = "GPU";
  description.limit_bytes = limit;
  auto backing = std::make_unique<backings::CudaVmmBacking>(api, 0);
  description.total_bytes = backing->memory().total_bytes;
  return std::make_unique<Allocator>(description, std::move(backing));
}

TEST(GpuPause, ContentsAndAddressesSurviveAndTheMemoryIsFreeMeanwhile) {
  std::string why;
  const std::optional<cu::Api> api = cu::load(why);
  if (!api) GTEST_SKIP() << "no real CUDA driver: " << why << " (scripts/gpu-check.sh runs this on a GPU machine)";
  int count = 0;
  if (api->init(0) != cu::kSuccess || api->device_get_count(&count) != cu::kSuccess || count == 0)
    GTEST_SKIP() << "the CUDA driver loads but sees no GPU";
  if (!cu::vmm_unsupported_reason(*api, 0).empty() || !api->has_copies())
    GTEST_SKIP() << "the GPU or driver lacks virtual memory management or cuMemcpy";

  auto gpu = vmm_allocator(*api, 512 * MiB);
  const std::size_t bytes = 64 * MiB;
  void* block = gpu->allocate(bytes);
  std::vector<std::uint32_t> pattern(bytes / 4);
  for (std::size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<std::uint32_t>(i * 2654435761u);
  // The allocator's backing made its primary context current around its own calls only: make it current here.
  cu::Context context = nullptr;
  ASSERT_EQ(api->primary_ctx_retain(&context, 0), cu::kSuccess);
  ASSERT_EQ(api->ctx_push_current(context), cu::kSuccess);
  ASSERT_EQ(api->memcpy_htod(reinterpret_cast<cu::DevicePtr>(block), pattern.data(), bytes), cu::kSuccess);

  std::size_t free_before = 0, total = 0;
  ASSERT_EQ(api->mem_get_info(&free_before, &total), cu::kSuccess);
  const std::uint64_t given_back = gpu->pause(PauseOptions{.keep_contents = true});
  std::size_t free_paused = 0;
  ASSERT_EQ(api->mem_get_info(&free_paused, &total), cu::kSuccess);
  EXPECT_GE(free_paused, free_before + given_back - 4 * MiB) << "the driver has the paused memory back";
  {
    auto other = vmm_allocator(*api, 512 * MiB);  // another job on the GPU, meanwhile
    void* borrowed = other->allocate(bytes);
    other->deallocate(borrowed);
  }
  gpu->resume();
  std::vector<std::uint32_t> read(bytes / 4);
  ASSERT_EQ(api->memcpy_dtoh(read.data(), reinterpret_cast<cu::DevicePtr>(block), bytes), cu::kSuccess);
  EXPECT_TRUE(read == pattern) << "the contents came back at the same address";
  cu::Context popped = nullptr;
  api->ctx_pop_current(&popped);
  api->primary_ctx_release(0);
  gpu->deallocate(block);
}

}  // namespace
}  // namespace plimsoll
