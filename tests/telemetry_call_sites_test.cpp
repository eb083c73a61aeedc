// CallSites: interning captured stacks into dense ids, and naming the first frame outside plimsoll.
// The functions that capture are non-inline and externally visible, so even a build without debug info (Release)
// names them from the symbol table; each stores to a volatile after its call, so the call is not a tail call
// (whose frame the stack would lose), and each stores a different value, so identical code folding cannot
// merge two of them into one.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "plimsoll/error.hpp"
#include "telemetry/recording/call_sites.hpp"

using plimsoll::telemetry::CallSites;
using plimsoll::telemetry::CallSiteSymbolizer;
using plimsoll::telemetry::SiteFrame;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

volatile int call_sites_test_sink = 0;

namespace plimsoll::testing {

// Stands for the recorder: a frame inside plimsoll between the user's code and capture().
[[gnu::noinline]] std::uint32_t capture_inside_plimsoll(CallSites& sites, int skip) {
  const std::uint32_t id = sites.capture(skip);
  call_sites_test_sink = 1;
  return id;
}

}  // namespace plimsoll::testing

[[gnu::noinline]] std::uint32_t call_sites_test_first_user_path(CallSites& sites, int skip) {
  const std::uint32_t id = plimsoll::testing::capture_inside_plimsoll(sites, skip);
  call_sites_test_sink = 2;
  return id;
}

[[gnu::noinline]] std::uint32_t call_sites_test_second_user_path(CallSites& sites) {
  const std::uint32_t id = plimsoll::testing::capture_inside_plimsoll(sites, 0);
  call_sites_test_sink = 3;
  return id;
}

// Each path (a number) takes its own way down: one frame of bit_zero or bit_one per bit, so every path is a
// distinct stack.
std::uint32_t call_sites_test_capture_along_bits(CallSites& sites, unsigned path, int bits_left);

[[gnu::noinline]] std::uint32_t call_sites_test_bit_zero(CallSites& sites, unsigned path, int bits_left) {
  const std::uint32_t id = call_sites_test_capture_along_bits(sites, path, bits_left);
  call_sites_test_sink = 4;
  return id;
}

[[gnu::noinline]] std::uint32_t call_sites_test_bit_one(CallSites& sites, unsigned path, int bits_left) {
  const std::uint32_t id = call_sites_test_capture_along_bits(sites, path, bits_left);
  call_sites_test_sink = 5;
  return id;
}

[[gnu::noinline]] std::uint32_t call_sites_test_capture_along_bits(CallSites& sites, unsigned path, int bits_left) {
  if (bits_left == 0) return plimsoll::testing::capture_inside_plimsoll(sites, 0);
  const auto next = (path & 1U) != 0 ? call_sites_test_bit_one : call_sites_test_bit_zero;
  const std::uint32_t id = next(sites, path >> 1U, bits_left - 1);
  call_sites_test_sink = 6;
  return id;
}

namespace {

TEST(CallSites, TheSamePathGetsTheSameIdAndAnotherPathAnotherId) {
  CallSites sites;
  std::vector<std::uint32_t> first_path_ids;
  std::vector<std::uint32_t> second_path_ids;
  // A loop whose bound is read from a volatile, so it is not unrolled: each path is called from one place, so
  // its stacks are equal.
  call_sites_test_sink = 3;
  const int rounds = call_sites_test_sink;
  for (int i = 0; i < rounds; ++i) {
    first_path_ids.push_back(call_sites_test_first_user_path(sites, 0));
    second_path_ids.push_back(call_sites_test_second_user_path(sites));
  }
  EXPECT_EQ(first_path_ids, std::vector<std::uint32_t>(3, 1));  // dense ids, in order of first capture
  EXPECT_EQ(second_path_ids, std::vector<std::uint32_t>(3, 2));
  EXPECT_EQ(sites.size(), 2U);
}

TEST(CallSites, SkipDropsInnermostFrames) {
  CallSites sites;
  std::vector<std::uint32_t> ids;
  // Both captures must come through one call instruction, or the frame of this test's body differs between them
  // (two return addresses) and the stacks cannot be compared. A loop over a constant list ({0, 1}) is unrolled by
  // Clang 14 at -O2 into two calls; a bound read from a volatile is not known to the compiler, and neither compiler
  // unrolls a loop of unknown trip count that makes a call.
  call_sites_test_sink = 2;
  const int captures = call_sites_test_sink;
  for (int skip = 0; skip < captures; ++skip) ids.push_back(call_sites_test_first_user_path(sites, skip));
  ASSERT_EQ(ids.size(), 2U);
  ASSERT_NE(ids[0], ids[1]);
  const std::vector<std::uintptr_t> whole = sites.frames(ids[0]);
  const std::vector<std::uintptr_t> skipped = sites.frames(ids[1]);
  ASSERT_GE(whole.size(), 3U);
  EXPECT_EQ(skipped, std::vector<std::uintptr_t>(whole.begin() + 1, whole.end()));
}

TEST(CallSites, DescribeNamesTheFirstFrameOutsidePlimsoll) {
  CallSites sites;
  const std::uint32_t id = call_sites_test_first_user_path(sites, 0);
  const std::string site = sites.describe(id);
  if (CallSiteSymbolizer::uses_libdw()) {
    EXPECT_THAT(site, StartsWith("call_sites_test_first_user_path(plimsoll::telemetry::CallSites&, int) ("));
  } else {
    // dladdr() cannot name a function of an executable: only the module and offset.
    EXPECT_THAT(site, HasSubstr("+0x"));
  }
  EXPECT_THAT(site, Not(HasSubstr("capture_inside_plimsoll")));
  EXPECT_EQ(sites.describe(call_sites_test_second_user_path(sites)).find("call_sites_test_second_user_path") ==
                std::string::npos,
            !CallSiteSymbolizer::uses_libdw());
}

TEST(CallSites, InternalFramesArePlimsollAndLibtorchButNotTheMainJob) {
  const auto internal = [](std::string function, std::string file = "", std::string module = "app") {
    SiteFrame frame;
    frame.function = std::move(function);
    frame.file = std::move(file);
    frame.module = std::move(module);
    return plimsoll::telemetry::is_internal_frame(frame, "/repo");
  };
  EXPECT_TRUE(internal("plimsoll::Allocator::allocate(unsigned long, unsigned short)"));
  EXPECT_TRUE(internal("c10::alloc_cpu(unsigned long)"));
  EXPECT_TRUE(internal("at::Tensor::clone(std::optional<c10::MemoryFormat>) const"));
  EXPECT_TRUE(internal("torch::empty(c10::ArrayRef<long>)"));
  EXPECT_TRUE(internal("anything", "", "/usr/lib/libtorch_cpu.so.1.13"));
  EXPECT_TRUE(internal("helper()", "/repo/src/engine/heap.cpp"));
  // The main job is a program on plimsoll: the leak demo's batch feed must be the named site.
  EXPECT_FALSE(internal("plimsoll::train::BatchFeed::tensors(plimsoll::train::BatchView const&)"));
  EXPECT_FALSE(internal("helper()", "/repo/src/train/batch_feed.cpp"));
  EXPECT_FALSE(internal("my_training_loop()", "/home/me/train.cpp"));
}

TEST(CallSites, StackHasEveryFrameSymbolizedInnermostFirst) {
  if (!CallSiteSymbolizer::uses_libdw()) GTEST_SKIP() << "built without libdw: frames have no function names";
  CallSites sites;
  const std::uint32_t id = call_sites_test_first_user_path(sites, 0);
  const std::vector<SiteFrame> stack = sites.stack(id);
  const std::vector<std::uintptr_t> addresses = sites.frames(id);
  ASSERT_EQ(stack.size(), addresses.size());
  ASSERT_GE(stack.size(), 3U);
  for (std::size_t i = 0; i < stack.size(); ++i) EXPECT_EQ(stack[i].address, addresses[i]);
  EXPECT_THAT(stack[0].function, HasSubstr("plimsoll::testing::capture_inside_plimsoll"));
  EXPECT_TRUE(stack[0].internal);
  EXPECT_THAT(stack[1].function, HasSubstr("call_sites_test_first_user_path"));
  EXPECT_FALSE(stack[1].internal);
  EXPECT_THAT(stack[1].module, HasSubstr("telemetry_call_sites_test"));  // the executable plimsoll is linked into
  EXPECT_THAT(stack[2].function, HasSubstr("StackHasEveryFrameSymbolizedInnermostFirst"))
      << "the test body called the path";
}

TEST(CallSites, SymbolizeAllListsEverySiteByIdWithZeroUnknown) {
  CallSites sites;
  const std::uint32_t first = call_sites_test_first_user_path(sites, 0);
  const std::uint32_t second = call_sites_test_second_user_path(sites);
  const std::vector<std::string> names = sites.symbolize_all();
  ASSERT_EQ(names.size(), 3U);
  EXPECT_EQ(names[0], "");
  EXPECT_EQ(names[first], sites.describe(first));
  EXPECT_EQ(names[second], sites.describe(second));
  EXPECT_NE(names[first], names[second]);
}

TEST(CallSites, IdZeroIsNoSiteAndUnknownIdsAreRejected) {
  CallSites sites;
  EXPECT_EQ(sites.describe(0), "");
  EXPECT_TRUE(sites.frames(0).empty());
  EXPECT_TRUE(sites.stack(0).empty());
  EXPECT_THROW(sites.describe(1), plimsoll::InvalidArgument);
  const std::uint32_t id = call_sites_test_second_user_path(sites);
  EXPECT_THROW(sites.frames(id + 1), plimsoll::InvalidArgument);
}

TEST(CallSites, AFullTableGivesNoSiteForNewStacksButKeepsKnownOnes) {
  CallSites sites(/*max_stacks=*/1);
  // One call expression per path, in a loop the compiler cannot unroll (its bound is read from a volatile):
  // the second round's stacks are the first round's.
  std::vector<std::uint32_t> second_path_ids;
  std::vector<std::uint32_t> first_path_ids;
  call_sites_test_sink = 2;
  const int rounds = call_sites_test_sink;
  for (int round = 0; round < rounds; ++round) {
    second_path_ids.push_back(call_sites_test_second_user_path(sites));
    first_path_ids.push_back(call_sites_test_first_user_path(sites, 0));
  }
  EXPECT_EQ(second_path_ids, std::vector<std::uint32_t>(2, 1));
  EXPECT_EQ(first_path_ids, std::vector<std::uint32_t>(2, 0));
  EXPECT_EQ(sites.size(), 1U);
}

TEST(CallSites, ManyDistinctStacksKeepTheirIdsAcrossTableGrowth) {
  // 2048 distinct stacks outgrow the first table (1024 slots, at most half full) twice.
  constexpr int kBits = 11;
  constexpr unsigned kPaths = 1U << kBits;
  CallSites sites;
  for (int pass = 0; pass < 2; ++pass) {
    for (unsigned path = 0; path < kPaths; ++path) {
      ASSERT_EQ(call_sites_test_capture_along_bits(sites, path, kBits), path + 1) << "pass " << pass;
    }
  }
  EXPECT_EQ(sites.size(), kPaths);
}

}  // namespace
