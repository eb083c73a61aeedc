// GPU share specs (cuda:N=SHARE[:CAP]) and the environment a governed child gets (include/plimsoll/sharing.hpp).
#include <cstdlib>

#include <gtest/gtest.h>

#include "plimsoll/error.hpp"
#include "plimsoll/sharing.hpp"

namespace plimsoll {
namespace {

constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;

TEST(ShareSpec, ParsesShareAndCap) {
  const ShareSpec spec = parse_share_spec("cuda:1=8GiB:16GiB");
  EXPECT_EQ(spec.device, 1);
  EXPECT_EQ(spec.share, "8GiB");
  EXPECT_EQ(spec.cap, "16GiB");
  EXPECT_EQ(spec.str(), "cuda:1=8GiB:16GiB");
  EXPECT_EQ(spec.resolve(80 * kGiB), (std::pair<std::uint64_t, std::uint64_t>{8 * kGiB, 16 * kGiB}));
}

TEST(ShareSpec, CapDefaultsToTheShare) {
  const ShareSpec spec = parse_share_spec(" cuda:0=2GiB ");
  EXPECT_TRUE(spec.cap.empty());
  EXPECT_EQ(spec.resolve(16 * kGiB), (std::pair<std::uint64_t, std::uint64_t>{2 * kGiB, 2 * kGiB}));
}

TEST(ShareSpec, PercentagesResolveAgainstTheGpu) {
  const ShareSpec spec = parse_share_spec("cuda:0=25%:50%");
  EXPECT_EQ(spec.resolve(80 * kGiB), (std::pair<std::uint64_t, std::uint64_t>{20 * kGiB, 40 * kGiB}));
  EXPECT_THROW(parse_share_spec("cuda:0=50%:25%").resolve(80 * kGiB), InvalidArgument) << "cap below share";
}

TEST(ShareSpec, RejectsMalformedSpecsNamingTheForm) {
  for (const char* bad : {"", "cuda:0", "gpu:0=1GiB", "cuda:x=1GiB", "cuda:0=", "cuda:0=lots", "cuda:0=0",
                          "cuda:0=1GiB:", "cuda:0=150%", "cuda:0=-5%", "cuda:0=4GiB:2GiB", "cuda:99999=1GiB"}) {
    try {
      parse_share_spec(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const InvalidArgument& error) {
      EXPECT_NE(std::string(error.what()).find("cuda:N=SHARE[:CAP]"), std::string::npos) << error.what();
    }
  }
}

TEST(ShareSpec, ShareAboveTheGpuIsRefusedWhenResolved) {
  EXPECT_THROW(parse_share_spec("cuda:0=100GiB").resolve(80 * kGiB), InvalidArgument);
}

TEST(ShareSpec, ListsOneSpecPerGpu) {
  const auto specs = parse_share_specs("cuda:0=1GiB,cuda:1=2GiB:3GiB");
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_EQ(specs[1].str(), "cuda:1=2GiB:3GiB");
  EXPECT_THROW(parse_share_specs("cuda:0=1GiB,cuda:0=2GiB"), InvalidArgument);
  EXPECT_THROW(parse_share_specs("cuda:0=1GiB,"), InvalidArgument);
}

TEST(SharingEnvironment, PreloadsTheInterposerAheadOfWhatWasThere) {
  const auto environment = sharing_environment({parse_share_spec("cuda:0=4GiB:8GiB")}, "/lib/other.so",
                                               "/tmp/ledgers", "/opt/plimsoll/libplimsoll_cuda_intercept.so");
  ASSERT_EQ(environment.size(), 3u);
  EXPECT_EQ(environment[0], (std::pair<std::string, std::string>{
                                "LD_PRELOAD", "/opt/plimsoll/libplimsoll_cuda_intercept.so:/lib/other.so"}));
  EXPECT_EQ(environment[1], (std::pair<std::string, std::string>{"PLIMSOLL_SHARE", "cuda:0=4GiB:8GiB"}));
  EXPECT_EQ(environment[2], (std::pair<std::string, std::string>{"PLIMSOLL_LEDGER_DIR", "/tmp/ledgers"}));
}

TEST(SharingEnvironment, WithoutLedgerDirLeavesTheDefault) {
  const auto environment = sharing_environment({parse_share_spec("cuda:0=1GiB")}, {}, {}, "/x.so");
  ASSERT_EQ(environment.size(), 2u);
  EXPECT_EQ(environment[0].second, "/x.so");
  EXPECT_THROW(sharing_environment({}, {}, {}, "/x.so"), InvalidArgument);
}

TEST(SharingEnvironment, InterceptorPathFollowsTheVariable) {
  ::setenv("PLIMSOLL_CUDA_INTERCEPT", "/somewhere/lib.so", 1);
  EXPECT_EQ(default_interceptor_path(), "/somewhere/lib.so");
  ::unsetenv("PLIMSOLL_CUDA_INTERCEPT");
}

TEST(SharingEnvironment, LedgerDirectoryDefaultsToDevShm) {
  ::unsetenv("PLIMSOLL_LEDGER_DIR");
  EXPECT_EQ(ledger_directory(), "/dev/shm");
  ::setenv("PLIMSOLL_LEDGER_DIR", "/tmp/x", 1);
  EXPECT_EQ(ledger_directory(), "/tmp/x");
  ::unsetenv("PLIMSOLL_LEDGER_DIR");
}

}  // namespace
}  // namespace plimsoll
