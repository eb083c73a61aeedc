// plimsoll::Pipeline building batches in pinned host memory (PipelineOptions::buffer_device) on the fake CUDA
// driver: every batch lies in the cpu-pinned device's page-locked granules, a batch released with release_when(an
// event recorded after its "host-to-device copy") stays parked until the copy's stream completes, and a device the
// workers cannot write through is refused with the fix.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "backings/pinned_host_backing.hpp"
#include "backings/sim_backing.hpp"
#include "fake_cuda_driver.hpp"
#include "plimsoll/allocator.hpp"
#include "plimsoll/error.hpp"
#include "plimsoll/pipeline.hpp"

namespace plimsoll {
namespace {

namespace cu = cuda_driver;
using ::testing::HasSubstr;
constexpr std::uint64_t MiB = std::uint64_t{1} << 20;

std::unique_ptr<Allocator> pinned_device(const fake_cuda::Driver& driver) {
  DeviceDescription description;
  description.name = "cpu-pinned";
  description.hardware = "pinned host memory";
  description.limit_bytes = 64 * MiB;
  return std::make_unique<Allocator>(description,
                                     std::make_unique<backings::PinnedHostBacking>(driver.api(), 0, 256 * MiB));
}

PipelineOptions options_on(Allocator* device) {
  PipelineOptions options;
  options.dataset_size = 64;
  options.batch_size = 8;
  options.sample_fields = {4096};
  options.workers = 2;
  options.max_batches = 3;
  options.buffer_device = device;
  return options;
}

SampleStage write_index() {
  return [](Sample& sample) { std::memset(sample.fields[0].data(), static_cast<int>(sample.index), 4096); };
}

TEST(PipelinePinnedBuffers, BatchesAreBuiltInPageLockedMemoryAndParkedUntilTheCopyCompletes) {
  fake_cuda::Driver driver;
  auto pinned = pinned_device(driver);
  fake_cuda::Stream& copies = driver.create_stream();
  const cu::Api& api = driver.api();
  // Events need a context current on the thread, as the CUDA runtime would have made it.
  cu::Context context = nullptr;
  ASSERT_EQ(api.primary_ctx_retain(&context, 0), cu::kSuccess);
  ASSERT_EQ(api.ctx_push_current(context), cu::kSuccess);
  cu::Event copied = nullptr;
  ASSERT_EQ(api.event_create(&copied, cu::kEventDisableTiming), cu::kSuccess);

  std::uint64_t delivered = 0;
  bool parked_seen = false;
  {
    // The pipeline goes before the event its parked batch waits on: destroying it waits for every parked copy,
    // and a destroyed event never reports the copy done.
    Pipeline pipeline(options_on(pinned.get()), {write_index()});
    while (auto batch = pipeline.next()) {
      const std::byte* data = batch->field(0).data();
      EXPECT_TRUE(pinned->owns(data)) << "batch buffer outside the pinned device";
      EXPECT_GE(driver.registered_bytes(), 4096u * 8) << "the buffer is page-locked";
      EXPECT_EQ(static_cast<unsigned char>(data[0]), static_cast<unsigned char>(delivered * 8));
      if (delivered == 0) {
        copies.hold();
        copies.launch();  // the host-to-device copy of this batch, still running
        ASSERT_EQ(api.event_record(copied, copies.handle()), cu::kSuccess);
        batch->release_when([&] { return api.event_query(copied) == cu::kSuccess; });
        const PipelineMetrics metrics = pipeline.metrics();
        EXPECT_EQ(metrics.parked, 1u);
        parked_seen = true;
      } else if (delivered == 1) {
        EXPECT_EQ(pipeline.metrics().parked, 1u) << "reused while its copy was still reading it";
        copies.release();
      }
      ++delivered;
    }
    const Stats stats = pinned->stats();
    EXPECT_LE(stats.live_allocations, 3u) << "at most max_batches buffers";
    ASSERT_FALSE(stats.tags.empty());
    EXPECT_EQ(stats.tags[0].tag, "pipeline batches");
  }
  EXPECT_TRUE(parked_seen);
  EXPECT_EQ(delivered, 8u);
  api.event_destroy(copied);
  cu::Context popped = nullptr;
  api.ctx_pop_current(&popped);
  api.primary_ctx_release(0);
}

TEST(PipelinePinnedBuffers, BuffersGoBackToTheDeviceWithThePipeline) {
  fake_cuda::Driver driver;
  auto pinned = pinned_device(driver);
  {
    Pipeline pipeline(options_on(pinned.get()), {write_index()});
    while (auto batch = pipeline.next()) {
    }
  }
  EXPECT_EQ(pinned->stats().in_use_bytes, 0u);
  pinned->trim();
  EXPECT_EQ(driver.registered_bytes(), 0u);
}

TEST(PipelinePinnedBuffers, ADeviceWorkersCannotWriteIsRefused) {
  DeviceDescription description;
  description.name = "sim:64MiB";
  description.hardware = "simulated device";
  description.limit_bytes = 64 * MiB;
  Allocator sim(description, std::make_unique<backings::SimBacking>(64 * MiB));
  try {
    Pipeline pipeline(options_on(&sim), {write_index()});
    FAIL() << "a pipeline over a simulated device";
  } catch (const InvalidArgument& error) {
    EXPECT_THAT(error.what(), HasSubstr("buffer_device is sim:64MiB"));
    EXPECT_THAT(error.what(), HasSubstr("cpu-pinned"));
  }
}

}  // namespace
}  // namespace plimsoll
