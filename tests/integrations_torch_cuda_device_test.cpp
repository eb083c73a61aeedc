// What libplimsoll_torch_cuda.so does per device (src/integrations/torch_cuda/torch_device.hpp), on the fake CUDA
// driver: same-stream frees reused at once as PyTorch's allocator does, other streams after the event, a bad free
// refused with the reason, the out-of-memory report kept, stats with PyTorch's key names, empty_cache giving the
// cache back (after waiting for pending frees) and reset_peak.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "fake_cuda_device.hpp"
#include "integrations/torch_cuda/torch_device.hpp"

namespace plimsoll::torch_cuda {
namespace {

using ::testing::HasSubstr;
constexpr std::size_t MiB = std::size_t{1} << 20;

TEST(TorchCudaDevice, SameStreamFreesAreReusedAtOnceOtherStreamsWait) {
  fake_cuda::Driver driver;
  auto allocator = fake_cuda::fake_cuda_allocator(driver, 32 * MiB);
  ASSERT_TRUE(allocator->stream_ordered());
  fake_cuda::Stream& compute = driver.create_stream();
  fake_cuda::Stream& copy = driver.create_stream();
  std::string why;
  void* x = torch_malloc(*allocator, 8 * MiB, compute.handle(), why);
  ASSERT_NE(x, nullptr) << why;
  compute.hold();
  compute.launch();
  ASSERT_TRUE(torch_free(*allocator, x, compute.handle(), why)) << why;
  EXPECT_EQ(torch_malloc(*allocator, 8 * MiB, compute.handle(), why), x) << "same stream: at once";
  void* y = torch_malloc(*allocator, 2 * MiB, copy.handle(), why);
  EXPECT_NE(y, nullptr);
  compute.release();
  EXPECT_TRUE(torch_free(*allocator, x, compute.handle(), why));
  EXPECT_TRUE(torch_free(*allocator, y, copy.handle(), why));
  EXPECT_FALSE(torch_free(*allocator, y, copy.handle(), why));
  EXPECT_THAT(why, HasSubstr("freed already"));
}

// record_stream through the shell: a block also used on a busy side stream is reused by nobody until that stream's
// work completed; a pointer that is not a live block is refused with the engine's reason, never an exception.
TEST(TorchCudaDevice, RecordStreamKeepsTheBlockFromEveryoneUntilTheSideStreamIsDone) {
  fake_cuda::Driver driver;
  auto allocator = fake_cuda::fake_cuda_allocator(driver, 32 * MiB);
  fake_cuda::Stream& compute = driver.create_stream();
  fake_cuda::Stream& side = driver.create_stream();
  std::string why;
  void* x = torch_malloc(*allocator, 4 * MiB, compute.handle(), why);
  ASSERT_NE(x, nullptr) << why;
  ASSERT_TRUE(torch_record_stream(*allocator, x, side.handle(), why)) << why;
  side.hold();
  side.launch();
  ASSERT_TRUE(torch_free(*allocator, x, compute.handle(), why)) << why;
  void* again = torch_malloc(*allocator, 4 * MiB, compute.handle(), why);
  EXPECT_NE(again, x) << "reused while the recorded side stream still used it";
  side.release();
  EXPECT_EQ(torch_malloc(*allocator, 4 * MiB, side.handle(), why), x);
  EXPECT_FALSE(torch_record_stream(*allocator, static_cast<char*>(x) + 256, side.handle(), why));
  EXPECT_THAT(why, HasSubstr("not a live allocation"));
  EXPECT_TRUE(torch_free(*allocator, x, side.handle(), why));
  EXPECT_TRUE(torch_free(*allocator, again, compute.handle(), why));
}

TEST(TorchCudaDevice, OutOfMemoryKeepsPlimsollsReport) {
  fake_cuda::Driver driver;
  auto allocator = fake_cuda::fake_cuda_allocator(driver, 8 * MiB);
  fake_cuda::Stream& stream = driver.create_stream();
  std::string why;
  EXPECT_EQ(torch_malloc(*allocator, 16 * MiB, stream.handle(), why), nullptr);
  EXPECT_THAT(why, HasSubstr("cuda:0"));
  EXPECT_THAT(why, HasSubstr("limit"));
}

TEST(TorchCudaDevice, StatsUsePyTorchsNamesEmptyCacheAndResetPeakWork) {
  fake_cuda::Driver driver;
  auto allocator = fake_cuda::fake_cuda_allocator(driver, 32 * MiB);
  fake_cuda::Stream& stream = driver.create_stream();
  std::string why;
  void* a = torch_malloc(*allocator, 10 * MiB, stream.handle(), why);
  void* b = torch_malloc(*allocator, 4 * MiB, stream.handle(), why);
  stream.hold();
  stream.launch();
  torch_free(*allocator, a, stream.handle(), why);
  auto stats = nlohmann::json::parse(stats_json(*allocator, 0));
  EXPECT_EQ(stats["device"], "cuda:0");
  EXPECT_EQ(stats["allocated_bytes.all.current"], 4 * MiB);
  EXPECT_EQ(stats["allocated_bytes.all.peak"], 14 * MiB);
  EXPECT_EQ(stats["parked_bytes"], 10 * MiB);
  EXPECT_EQ(stats["stream_fallbacks"], 0) << "every free was stream-ordered";
  EXPECT_EQ(stats["unrecorded_streams"], 0);
  EXPECT_EQ(stats["active_bytes.all.current"], 14 * MiB) << "parked blocks are still active on their stream";
  EXPECT_GE(stats["reserved_bytes.all.current"].get<std::uint64_t>(), 14 * MiB);
  EXPECT_EQ(stats["allocation.all.current"], 1);

  stream.release();
  const std::uint64_t released = empty_cache(*allocator);
  EXPECT_GE(released, 10 * MiB) << "the parked block came back and its granules went";
  EXPECT_EQ(driver.mapped_bytes(), allocator->stats().reserved_bytes);
  EXPECT_EQ(driver.counters().ctx_synchronize, 0u) << "stream frees need no device synchronization";

  allocator->reset_peaks();
  stats = nlohmann::json::parse(stats_json(*allocator, 0));
  EXPECT_EQ(stats["allocated_bytes.all.peak"], 4 * MiB);
  EXPECT_EQ(stats["reserved_bytes.all.peak"], stats["reserved_bytes.all.current"]);
  torch_free(*allocator, b, stream.handle(), why);
}

TEST(TorchCudaDevice, PauseKeepsTensorsAtTheirAddressesAndResumeRefusesTheWrongOrder) {
  fake_cuda::Driver driver;
  auto allocator = fake_cuda::fake_cuda_allocator(driver, 32 * MiB);
  fake_cuda::Stream& stream = driver.create_stream();
  std::string why;
  auto* weights = static_cast<unsigned char*>(torch_malloc(*allocator, 6 * MiB, stream.handle(), why));
  ASSERT_NE(weights, nullptr) << why;
  for (std::size_t i = 0; i < 6 * MiB; i += 4096) weights[i] = static_cast<unsigned char>(i / 4096);
  EXPECT_GE(pause(*allocator, true, why), static_cast<long long>(6 * MiB)) << why;
  EXPECT_EQ(driver.mapped_bytes(), 0u);
  EXPECT_EQ(torch_malloc(*allocator, 1 * MiB, stream.handle(), why), nullptr);
  EXPECT_THAT(why, HasSubstr("paused"));
  EXPECT_EQ(pause(*allocator, false, why), -1);
  EXPECT_THAT(why, HasSubstr("paused already"));
  ASSERT_TRUE(resume(*allocator, why)) << why;
  bool same = true;
  for (std::size_t i = 0; i < 6 * MiB; i += 4096) same = same && weights[i] == static_cast<unsigned char>(i / 4096);
  EXPECT_TRUE(same) << "the tensor's bytes came back at its address";
  EXPECT_FALSE(resume(*allocator, why));
  EXPECT_THAT(why, HasSubstr("not paused"));
  EXPECT_TRUE(torch_free(*allocator, weights, stream.handle(), why));
}

}  // namespace
}  // namespace plimsoll::torch_cuda
