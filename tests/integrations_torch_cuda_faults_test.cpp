// libplimsoll_torch_cuda.so's per-device calls (src/integrations/torch_cuda/torch_device.hpp) out of host memory.
// They are noexcept, and each keeps the reason of a failure in a std::string: a reason that cannot be copied (the
// copy allocates, and host memory is often what ran out) must leave `why` empty, never end the process through
// std::terminate, and never leave an earlier call's reason there. Failures are injected by replacing operator new in
// this test program (failing_operator_new.hpp): allocation number 0, 1, 2, ... of the call fails in turn, until the
// call no longer uses the failure. The tests skip under a sanitizer. Over the fake CUDA driver: no GPU needed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "failing_operator_new.hpp"
#include "fake_cuda_device.hpp"
#include "integrations/torch_cuda/torch_device.hpp"

namespace plimsoll::torch_cuda {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;
constexpr std::size_t MiB = std::size_t{1} << 20;
constexpr int kMostNews = 256;

// Runs `call` with its allocation number `news` failing, for news = 0, 1, ... until the call made fewer allocations
// than that; `check` sees each result. Returns how many runs had a failure injected (used by the call).
template <typename Call, typename Check>
int walk_failures(Call&& call, Check&& check) {
  int failed = 0;
  for (int news = 0; news < kMostNews; ++news) {
    std::string why = "an earlier call's reason, which must not be reported again";
    t_news_before_failure = news;
    const auto result = call(why);
    const bool used = t_news_before_failure < 0;
    t_news_before_failure = -1;
    check(result, why, news);
    if (!used) break;
    ++failed;
  }
  return failed;
}

// A pause of a paused device and a resume of a running one fail with the engine's reason: out of host memory while
// the engine builds that reason (its bad_alloc is then the reason), or while it is copied into `why`, they still return
// their failure value, with a reason or nothing. Before the fix, the copy's bad_alloc left the noexcept pause(): std::terminate.
TEST(TorchCudaFaults, PauseAndResumeFailuresOutOfHostMemoryKeepTheReasonOrNothing) {
  SKIP_UNLESS_NEW_CAN_FAIL();
  fake_cuda::Driver driver;
  auto allocator = fake_cuda::fake_cuda_allocator(driver, 32 * MiB);
  fake_cuda::Stream& stream = driver.create_stream();
  std::string why;
  void* block = torch_malloc(*allocator, 4 * MiB, stream.handle(), why);
  ASSERT_NE(block, nullptr) << why;

  const int resume_failures = walk_failures([&](std::string& reason) { return resume(*allocator, reason); },
                                            [](bool resumed, const std::string& reason, int news) {
                                              EXPECT_FALSE(resumed) << "allocation " << news;
                                              EXPECT_THAT(reason, AnyOf("", "std::bad_alloc", HasSubstr("not paused")))
                                                  << "allocation " << news;
                                            });
  EXPECT_GT(resume_failures, 0) << "no allocation of the failing resume was failed: the test checks nothing";
  EXPECT_FALSE(allocator->paused());

  ASSERT_GE(pause(*allocator, true, why), 0) << why;
  const int pause_failures = walk_failures([&](std::string& reason) { return pause(*allocator, false, reason); },
                                           [](long long given_back, const std::string& reason, int news) {
                                             EXPECT_EQ(given_back, -1) << "allocation " << news;
                                             EXPECT_THAT(reason, AnyOf("", "std::bad_alloc", HasSubstr("paused already")))
                                                 << "allocation " << news;
                                           });
  EXPECT_GT(pause_failures, 0) << "no allocation of the failing pause was failed: the test checks nothing";
  EXPECT_TRUE(allocator->paused()) << "a refused pause changes nothing";
  ASSERT_TRUE(resume(*allocator, why)) << why;
  EXPECT_TRUE(torch_free(*allocator, block, stream.handle(), why)) << why;
}

// The same for a bad free and a record_stream of a pointer that is no live block: false, the reason or nothing.
TEST(TorchCudaFaults, RefusedFreesAndRecordStreamsOutOfHostMemoryKeepTheReasonOrNothing) {
  SKIP_UNLESS_NEW_CAN_FAIL();
  fake_cuda::Driver driver;
  auto allocator = fake_cuda::fake_cuda_allocator(driver, 32 * MiB);
  fake_cuda::Stream& stream = driver.create_stream();
  std::string why;
  auto* block = static_cast<char*>(torch_malloc(*allocator, 4 * MiB, stream.handle(), why));
  ASSERT_NE(block, nullptr) << why;
  // record_stream's own bad_alloc has a reason of its own ("out of host memory; the block's streams are as before").
  const auto refused = [](bool done, const std::string& reason, int news) {
    EXPECT_FALSE(done) << "allocation " << news;
    EXPECT_THAT(reason, AnyOf("", "std::bad_alloc", HasSubstr("not a live allocation"), HasSubstr("out of host memory")))
        << "allocation " << news;
  };
  EXPECT_GT(walk_failures([&](std::string& reason) { return torch_free(*allocator, block + 256, stream.handle(), reason); },
                          refused),
            0);
  EXPECT_GT(walk_failures(
                [&](std::string& reason) {
                  return torch_record_stream(*allocator, block + 256, stream.handle(), reason);
                },
                refused),
            0);
  EXPECT_TRUE(torch_free(*allocator, block, stream.handle(), why)) << why;
  EXPECT_EQ(allocator->stats().live_allocations, 0u);
}

}  // namespace
}  // namespace plimsoll::torch_cuda
