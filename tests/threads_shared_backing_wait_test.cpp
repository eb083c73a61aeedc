// An allocation on a shared GPU that waits for borrowers to give memory back waits without the allocator's lock
// (docs/sharing.md, "A process with plimsoll's own allocator"): another thread allocates and frees meanwhile, and the
// waiting allocation succeeds once the borrower gave the memory back.
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "plimsoll/allocator.hpp"
#include "plimsoll/sharing.hpp"
#include "sharing/gpu_share.hpp"
#include "sharing/ledger.hpp"
#include "sharing_support.hpp"

namespace plimsoll::sharing {
namespace {

using plimsoll::testing::LiveProcess;
using plimsoll::testing::shared_sim_allocator;
using plimsoll::testing::TempDirectory;
constexpr std::uint64_t MiB = std::uint64_t{1} << 20;
constexpr const char* kUuid = "GPU-00000000-0000-0000-0000-0000000wa17";

TEST(SharedBackingWait, OtherThreadsAllocateWhileOneWaitsForATrim) {
  ::setenv("PLIMSOLL_SHARE_TRIM_WAIT_MS", "20000", 1);  // long enough that only a lock held across it could lose
  const TempDirectory dir;
  Ledger ledger(LedgerFile::open_or_create(dir.path(), kUuid, 100 * MiB));
  LiveProcess borrower_process;  // an engine process that borrowed 70 MiB and never answers by itself
  const int borrower = ledger.join(Member{.who = borrower_process.identity(), .share = 10 * MiB, .cap = 100 * MiB,
                                          .can_trim = true, .interposed = false, .command = "borrower"});
  ASSERT_EQ(ledger.charge(borrower, 80 * MiB).verdict, Verdict::admitted);

  GpuShare share(kUuid, 100 * MiB, parse_share_spec("cuda:0=50MiB"), dir.path());
  const auto device = shared_sim_allocator(share, 50 * MiB, 100 * MiB);
  Allocator& gpu = *device;
  void* first = gpu.allocate(8 * MiB);

  std::atomic<bool> finished{false};
  void* waited = nullptr;
  std::thread asker([&] {
    waited = gpu.try_allocate(30 * MiB);  // within its share, but the borrower holds the room: asks and waits
    finished.store(true);
  });
  LedgerEntry& entry = ledger.file().layout().entries[borrower];
  while (entry.trim_wanted.load() == 0 && !finished.load()) std::this_thread::yield();
  ASSERT_FALSE(finished.load()) << "the allocation did not wait for the borrower";

  gpu.deallocate(first);  // the allocator's lock is free while the other thread waits
  void* meanwhile = gpu.allocate(1 * MiB);
  EXPECT_FALSE(finished.load()) << "this thread allocated and freed while the other was still waiting";

  ledger.release(borrower, 70 * MiB);  // the borrower gives its loan back
  ledger.trim_done(borrower);
  asker.join();
  EXPECT_NE(waited, nullptr) << "the allocation retried after the wait and got the memory";
  if (waited != nullptr) gpu.deallocate(waited);
  gpu.deallocate(meanwhile);
  ::unsetenv("PLIMSOLL_SHARE_TRIM_WAIT_MS");
}

TEST(SharedBackingWait, AResumeWaitsForTheBorrowersItAskedWithoutTheLock) {
  ::setenv("PLIMSOLL_SHARE_TRIM_WAIT_MS", "20000", 1);
  const TempDirectory dir;
  Ledger ledger(LedgerFile::open_or_create(dir.path(), kUuid, 100 * MiB));
  GpuShare share(kUuid, 100 * MiB, parse_share_spec("cuda:0=50MiB"), dir.path());
  const auto device = shared_sim_allocator(share, 50 * MiB, 100 * MiB);
  Allocator& gpu = *device;
  void* state = gpu.allocate(30 * MiB);
  gpu.pause();
  // Meanwhile an engine process borrows the room beyond its share.
  LiveProcess borrower_process;
  const int borrower = ledger.join(Member{.who = borrower_process.identity(), .share = 10 * MiB, .cap = 100 * MiB,
                                          .can_trim = true, .interposed = false, .command = "borrower"});
  ASSERT_EQ(ledger.charge(borrower, 90 * MiB).verdict, Verdict::admitted);

  std::atomic<bool> finished{false};
  std::string failure;
  std::thread resumer([&] {
    try {
      gpu.resume();  // within its share, but the borrower holds the room: asks and waits
    } catch (const std::exception& error) {
      failure = error.what();
    }
    finished.store(true);
  });
  LedgerEntry& entry = ledger.file().layout().entries[borrower];
  while (entry.trim_wanted.load() == 0 && !finished.load()) std::this_thread::yield();
  ASSERT_FALSE(finished.load()) << "the resume did not wait: " << failure;
  EXPECT_TRUE(gpu.paused()) << "the device's lock is free while the resume waits";
  ledger.release(borrower, 80 * MiB);  // the borrower gives its loan back
  ledger.trim_done(borrower);
  resumer.join();
  EXPECT_EQ(failure, "");
  EXPECT_FALSE(gpu.paused());
  EXPECT_TRUE(gpu.owns(state));
  gpu.deallocate(state);
  ::unsetenv("PLIMSOLL_SHARE_TRIM_WAIT_MS");
}

}  // namespace
}  // namespace plimsoll::sharing
