// How libplimsoll_torch_cuda.so's C functions report failures (src/integrations/torch_cuda/failure_report.hpp), out of
// host memory: the reason in hand is printed whole, never lost to a failed concatenation; last_error() holds that
// call's reason or its fixed text, never "" and never an earlier call's reason. Failures are injected by replacing
// operator new in this test program (failing_operator_new.hpp); the tests skip under a sanitizer.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <thread>

#include "failing_operator_new.hpp"
#include "integrations/torch_cuda/failure_report.hpp"

namespace plimsoll::torch_cuda {
namespace {

using ::testing::AnyOf;
using ::testing::internal::CaptureStderr;
using ::testing::internal::GetCapturedStderr;

constexpr int kMostNews = 64;
constexpr const char* kUnexpected = "unexpected failure (out of host memory?)";

// A reason longer than any string's inline buffer, so that keeping or extending it must allocate.
const std::string kLongReason = "cuda:0 is out of memory: 512.0 MiB asked, 3.5 GiB live of 4 GiB (plimsoll's report)";

// The malloc/free report prints the reason it has whole, with nothing to allocate: before, prefixing it built a new
// string, and when that failed the reason was dropped for the fixed fallback.
TEST(TorchCudaReport, MallocAndFreeFailuresPrintTheirReasonOutOfHostMemory) {
  SKIP_UNLESS_NEW_CAN_FAIL();
  const std::string prefixed = "plimsoll: " + kLongReason;
  const std::string ended = kLongReason + "\n";
  CaptureStderr();
  {
    const ScopedFailures failures;
    say(kLongReason, 0, "out of memory on");
    say(prefixed, 0, "out of memory on");  // plimsoll's OOM report carries the prefix already
    say(ended, 0, "out of memory on");
    say("", 3, "out of memory on");  // the reason could not be copied: the fixed text
  }
  EXPECT_EQ(GetCapturedStderr(), "plimsoll: " + kLongReason + "\nplimsoll: " + kLongReason + "\nplimsoll: " +
                                     kLongReason + "\nplimsoll: out of memory on cuda:3\n");
}

// A reason that cannot be kept is printed, and its call's fixed text kept: not the earlier reason the kept string
// still holds, not "".
TEST(TorchCudaReport, AReasonThatCannotBeKeptLeavesTheFixedTextNeverTheEarlierOne) {
  SKIP_UNLESS_NEW_CAN_FAIL();
  CaptureStderr();
  say(std::string("earlier"), "fixed: earlier");
  EXPECT_STREQ(last_error(), "earlier");
  {
    const ScopedFailures failures;
    say(kLongReason, "fixed: pause failed");
  }
  EXPECT_STREQ(last_error(), "fixed: pause failed");
  say(std::string("a later reason"), "fixed: later");
  EXPECT_STREQ(last_error(), "a later reason") << "a reason kept again replaces the fixed text";
  say(std::string(), "fixed: resume failed");  // the per-device call could not copy its reason
  EXPECT_STREQ(last_error(), "fixed: resume failed");
  EXPECT_EQ(GetCapturedStderr(), "plimsoll: earlier\nplimsoll: " + kLongReason +
                                     "\nplimsoll: a later reason\nplimsoll: fixed: resume failed\n");
}

// An unexpected exception caught by a C function: its what() when the reason can be built, else "unexpected
// failure" and the fixed reason. Every allocation of the report fails in turn, then all of them: last_error() is
// never the earlier reason (before, the fixed reason was assigned into the kept string, which out of host memory
// failed and left the earlier one).
TEST(TorchCudaReport, UnexpectedFailuresAlwaysLeaveThisCallsReason) {
  SKIP_UNLESS_NEW_CAN_FAIL();
  const std::runtime_error error("lock failed");
  const auto report = [&](bool every_allocation_fails, int news) {
    CaptureStderr();
    say(std::string("earlier"), "fixed: earlier");  // shorter than the fixed reason: keeping that would allocate
    try {
      throw error;
    } catch (...) {
      t_news_before_failure = news;
      t_fail_new = every_allocation_fails;
      say_unexpected("pause", 3);
      t_fail_new = false;
    }
    const bool used = t_news_before_failure < 0;
    t_news_before_failure = -1;
    const std::string said = GetCapturedStderr();
    EXPECT_THAT(last_error(), AnyOf(std::string("cannot pause cuda:3: lock failed"), std::string(kUnexpected)))
        << "allocation " << news;
    EXPECT_THAT(said, AnyOf("plimsoll: earlier\nplimsoll: cannot pause cuda:3: lock failed\n",
                            "plimsoll: earlier\nplimsoll: cannot pause cuda:3: unexpected failure\n"))
        << "allocation " << news;
    return used;
  };
  // First, on a thread of its own: its kept string is new, with no room yet for the fixed reason.
  std::thread([&] {
    report(true, -1);
    EXPECT_STREQ(last_error(), kUnexpected);
  }).join();
  int failed = 0;
  for (int news = 0; news < kMostNews && report(false, news); ++news) ++failed;
  EXPECT_GT(failed, 0) << "no allocation of the report was failed: the test checks nothing";

  // Not an std::exception: nothing to say but the fixed reason.
  CaptureStderr();
  say(std::string("earlier"), "fixed: earlier");
  try {
    throw 42;
  } catch (...) {
    say_unexpected("record_stream on", -1);
  }
  EXPECT_EQ(GetCapturedStderr(),
            "plimsoll: earlier\nplimsoll: cannot record_stream on the device holding it: unexpected failure\n");
  EXPECT_STREQ(last_error(), kUnexpected);
}

}  // namespace
}  // namespace plimsoll::torch_cuda
