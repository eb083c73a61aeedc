// Stream-ordered reuse and the growable segment against the REAL CUDA driver (label gpu; scripts/gpu-check.sh runs
// it, under compute-sanitizer memcheck too). Skips, saying why, where libcuda.so.1 or a GPU is missing, so it
// always builds and runs in CI. Work on the streams is cuMemsetD32Async over whole blocks (no kernels to compile):
// a block written on one stream, freed there and reused at once on the same stream must read as the second
// writer left it; another stream must not get it while the first stream's writes are still queued; a random
// multi-stream workload with trims must end with no driver error (an unmap under queued work is a GPU fault, which
// memcheck reports and which makes every later call fail).
#include <dlfcn.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "backings/cuda_vmm_backing.hpp"
#include "backings/pinned_host_backing.hpp"
#include "devices/cuda_driver.hpp"
#include "plimsoll/allocator.hpp"

namespace plimsoll {
namespace {

namespace cu = cuda_driver;
constexpr std::uint64_t MiB = std::uint64_t{1} << 20;

// The few driver calls the test itself needs to give streams work, beyond plimsoll's Api.
struct TestCalls {
  cu::Result (*stream_create)(cu::Stream*, unsigned int) = nullptr;
  cu::Result (*stream_destroy)(cu::Stream) = nullptr;
  cu::Result (*stream_synchronize)(cu::Stream) = nullptr;
  cu::Result (*memset_d32_async)(cu::DevicePtr, unsigned int, std::size_t, cu::Stream) = nullptr;
  cu::Result (*memcpy_dtoh)(void*, cu::DevicePtr, std::size_t) = nullptr;
  cu::Result (*ctx_set_current)(cu::Context) = nullptr;
  cu::Result (*memcpy_htod_async)(cu::DevicePtr, const void*, std::size_t, cu::Stream) = nullptr;
};

template <class F>
bool bind(void* library, const char* name, F& slot) {
  slot = reinterpret_cast<F>(::dlsym(library, name));
  return slot != nullptr;
}

class RealDriver : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    api_ = cu::load(why);
    if (!api_) GTEST_SKIP() << "no real CUDA driver: " << why << " (scripts/gpu-check.sh runs this on a GPU machine)";
    int count = 0;
    if (api_->init(0) != cu::kSuccess || api_->device_get_count(&count) != cu::kSuccess || count == 0)
      GTEST_SKIP() << "the CUDA driver loads but sees no GPU";
    if (!api_->has_vmm() || !api_->has_events()) GTEST_SKIP() << "the driver lacks virtual memory management or events";
    void* library = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(library, nullptr);
    ASSERT_TRUE(bind(library, "cuStreamCreate", calls_.stream_create) &&
                bind(library, "cuStreamDestroy_v2", calls_.stream_destroy) &&
                bind(library, "cuStreamSynchronize", calls_.stream_synchronize) &&
                bind(library, "cuMemsetD32Async", calls_.memset_d32_async) &&
                bind(library, "cuMemcpyDtoH_v2", calls_.memcpy_dtoh) &&
                bind(library, "cuCtxSetCurrent", calls_.ctx_set_current) &&
                bind(library, "cuMemcpyHtoDAsync_v2", calls_.memcpy_htod_async));
    ASSERT_EQ(api_->device_get(&device_, 0), cu::kSuccess);
    ASSERT_EQ(api_->primary_ctx_retain(&context_, device_), cu::kSuccess);
    ASSERT_EQ(calls_.ctx_set_current(context_), cu::kSuccess);  // as PyTorch's thread has it
    auto backing = std::make_unique<backings::CudaVmmBacking>(*api_, device_);
    DeviceDescription description;
    description.name = "cuda:0";
    description.hardware = "real GPU";
    description.policy.growth = Growth::on_demand;
    description.limit_bytes = 2048 * MiB;
    description.total_bytes = backing->memory().total_bytes;
    allocator_ = std::make_unique<Allocator>(description, std::move(backing));
    ASSERT_TRUE(allocator_->stream_ordered());
  }
  void TearDown() override {
    allocator_.reset();
    for (cu::Stream stream : streams_) calls_.stream_destroy(stream);
    if (context_ != nullptr) api_->primary_ctx_release(device_);
  }

  cu::Stream new_stream() {
    cu::Stream stream = nullptr;
    EXPECT_EQ(calls_.stream_create(&stream, 1 /* CU_STREAM_NON_BLOCKING, as PyTorch's pool */), cu::kSuccess);
    streams_.push_back(stream);
    return stream;
  }
  void fill(void* ptr, std::uint64_t bytes, std::uint32_t value, cu::Stream stream, int times = 1) {
    for (int i = 0; i < times; ++i)
      ASSERT_EQ(calls_.memset_d32_async(reinterpret_cast<cu::DevicePtr>(ptr), value, bytes / 4, stream), cu::kSuccess);
  }
  std::uint32_t read_word(void* ptr, std::uint64_t offset) {
    std::uint32_t word = 0;
    EXPECT_EQ(calls_.memcpy_dtoh(&word, reinterpret_cast<cu::DevicePtr>(ptr) + offset, sizeof word), cu::kSuccess);
    return word;
  }

  std::optional<cu::Api> api_;
  TestCalls calls_;
  cu::Device device_ = 0;
  cu::Context context_ = nullptr;
  std::vector<cu::Stream> streams_;
  std::unique_ptr<Allocator> allocator_;
};

TEST_F(RealDriver, SameStreamReuseIsOrderedAndOtherStreamsWait) {
  cu::Stream a = new_stream();
  cu::Stream b = new_stream();
  const std::uint64_t bytes = 512 * MiB;
  void* x = allocator_->allocate(bytes, Stream{a});
  fill(x, bytes, 0x11111111u, a, 40);  // tens of milliseconds of queued writes
  allocator_->deallocate(x, Stream{a});
  void* on_b = allocator_->allocate(bytes, Stream{b});
  if (allocator_->stats().parked_bytes > 0) {
    EXPECT_NE(on_b, x) << "stream b got memory stream a still writes";
  }
  void* again = allocator_->allocate(bytes, Stream{a});
  if (on_b != x) {
    EXPECT_EQ(again, x) << "the freeing stream reuses its block at once";
  }
  fill(again, bytes, 0x22222222u, a);
  ASSERT_EQ(calls_.stream_synchronize(a), cu::kSuccess);
  EXPECT_EQ(read_word(again, 0), 0x22222222u);
  EXPECT_EQ(read_word(again, bytes - 4), 0x22222222u) << "stream order: the second writer's words are last";
  allocator_->deallocate(again, Stream{a});
  allocator_->deallocate(on_b, Stream{b});
  EXPECT_GT(allocator_->trim(), 0u);
  EXPECT_EQ(allocator_->stats().reserved_bytes, 0u);
}

TEST_F(RealDriver, RandomMultiStreamWorkloadWithTrimsEndsWithoutADriverError) {
  std::vector<cu::Stream> streams;
  for (int i = 0; i < 4; ++i) streams.push_back(new_stream());
  std::mt19937_64 random(12);
  struct Live {
    void* ptr;
    std::uint64_t bytes;
    int stream;
  };
  std::vector<Live> live;
  for (int op = 0; op < 3000; ++op) {
    const int s = static_cast<int>(random() % streams.size());
    if (live.size() < 64 && random() % 2 == 0) {
      const std::uint64_t bytes = (std::uint64_t{4} << (random() % 24)) + 4 * (random() % 1000);
      void* ptr = allocator_->try_allocate(bytes, Stream{streams[static_cast<std::size_t>(s)]});
      if (ptr == nullptr) continue;
      fill(ptr, bytes, static_cast<std::uint32_t>(op), streams[static_cast<std::size_t>(s)]);
      live.push_back({ptr, bytes, s});
    } else if (!live.empty()) {
      const std::size_t pick = random() % live.size();
      allocator_->deallocate(live[pick].ptr, Stream{streams[static_cast<std::size_t>(live[pick].stream)]});
      live.erase(live.begin() + static_cast<long>(pick));
    }
    if (op % 500 == 499) allocator_->trim();  // unmaps only what no queued work uses
  }
  for (const Live& block : live)
    allocator_->deallocate(block.ptr, Stream{streams[static_cast<std::size_t>(block.stream)]});
  for (cu::Stream stream : streams) EXPECT_EQ(calls_.stream_synchronize(stream), cu::kSuccess);
  allocator_->trim();
  EXPECT_EQ(allocator_->stats().reserved_bytes, 0u);
  EXPECT_EQ(allocator_->stats().parked_bytes, 0u);
}

TEST_F(RealDriver, PinnedHostBuffersCopyAsynchronouslyAndWaitForTheirCopy) {
  if (!api_->has_host_register()) GTEST_SKIP() << "the driver lacks cuMemHostRegister";
  DeviceDescription description;
  description.name = "cpu-pinned";
  description.hardware = "pinned host memory";
  description.limit_bytes = 256 * MiB;
  Allocator pinned(description, std::make_unique<backings::PinnedHostBacking>(*api_, device_, 1024 * MiB));
  ASSERT_TRUE(pinned.stream_ordered());
  cu::Stream copies = new_stream();
  cu::Stream other = new_stream();
  const std::uint64_t bytes = 64 * MiB;
  void* target = allocator_->allocate(bytes, Stream{copies});
  auto* staging = static_cast<std::uint32_t*>(pinned.allocate(bytes, Stream{copies}));
  for (std::uint64_t i = 0; i < bytes / 4; ++i) staging[i] = 0x5a5a0000u + static_cast<std::uint32_t>(i % 1000);
  for (int i = 0; i < 8; ++i)  // a few copies, so the stream is busy for a while
    ASSERT_EQ(calls_.memcpy_htod_async(reinterpret_cast<cu::DevicePtr>(target), staging, bytes, copies), cu::kSuccess);
  pinned.deallocate(staging, Stream{copies});
  void* elsewhere = pinned.allocate(bytes, Stream{other});
  if (pinned.stats().parked_bytes > 0) {
    EXPECT_NE(elsewhere, static_cast<void*>(staging)) << "a staging buffer reused while its copy still reads it";
  }
  ASSERT_EQ(calls_.stream_synchronize(copies), cu::kSuccess);
  EXPECT_EQ(read_word(target, 4 * 999), 0x5a5a0000u + 999u);
  pinned.deallocate(elsewhere, Stream{other});
  allocator_->deallocate(target, Stream{copies});
  pinned.trim();
  EXPECT_EQ(pinned.stats().reserved_bytes, 0u);
}

}  // namespace
}  // namespace plimsoll
