// The share view (src/sharing/share_view.hpp): what a process under a share is shown of its GPU, the one rule the
// interposer's cuMemGetInfo and a Runtime's planning on a shared GPU both follow.
#include <gtest/gtest.h>

#include "sharing/share_view.hpp"

namespace {

using plimsoll::sharing::GpuMemoryView;
using plimsoll::sharing::seen_under_share;

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;

TEST(ShareView, TotalIsTheCapAndFreeWhatTheLedgerWouldCharge) {
  const GpuMemoryView driver{.free_bytes = 200 * kMiB, .total_bytes = 256 * kMiB};
  EXPECT_EQ(seen_under_share(driver, 128 * kMiB, 64 * kMiB),
            (GpuMemoryView{.free_bytes = 64 * kMiB, .total_bytes = 128 * kMiB}));
}

TEST(ShareView, NeverMoreThanTheDriverShows) {
  // Others' use leaves less free than the ledger would charge; a cap is never more than the GPU.
  const GpuMemoryView driver{.free_bytes = 30 * kMiB, .total_bytes = 256 * kMiB};
  EXPECT_EQ(seen_under_share(driver, 512 * kMiB, 100 * kMiB),
            (GpuMemoryView{.free_bytes = 30 * kMiB, .total_bytes = 256 * kMiB}));
}

}  // namespace
