// GPU ledgers under concurrency, across processes (label threads, so the TSan phase runs it): 2 and 8 processes
// racing to charge never pass the limit together; processes SIGKILLed at random points are reclaimed and a lock
// left by a dead holder is repaired; an engine process borrowing another's share gives it back when asked.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "plimsoll/allocator.hpp"
#include "plimsoll/sharing.hpp"
#include "sharing/ledger.hpp"
#include "sharing/ledger_snapshot.hpp"
#include "sharing_support.hpp"

namespace plimsoll::sharing {
namespace {

using plimsoll::testing::shared_sim_allocator;
using plimsoll::testing::TempDirectory;
constexpr std::uint64_t MiB = std::uint64_t{1} << 20;
constexpr std::uint64_t kLimit = 256 * MiB;
constexpr const char* kUuid = "GPU-race0000-0000-0000-0000-000000000000";

// Exit statuses of a racing child.
constexpr int kChildOk = 0;
constexpr int kChildSawOverLimit = 10;
constexpr int kChildLostCount = 11;

// One racing process: joins with a small share and a cap of the whole GPU, then charges and releases at random.
// Odd seeds race as engine processes (they may borrow every free byte), even ones as driver-governed processes
// (only what no share waits for), so both admission paths meet. Returns its exit status.
int race(const std::string& dir, int rounds, std::uint64_t seed, std::uint64_t max_chunk_mib, int refusals_out = -1) {
  Ledger ledger(LedgerFile::open_or_create(dir, kUuid, kLimit));
  const bool engine = seed % 2 == 1;
  const int slot = ledger.join(Member{.who = this_process(), .share = 8 * MiB, .cap = kLimit, .can_trim = engine,
                                      .interposed = !engine, .command = "racer"});
  std::mt19937_64 random(seed);
  std::uint64_t mine = 0;
  int refusals = 0;
  std::vector<std::uint64_t> held;
  for (int round = 0; round < rounds; ++round) {
    if (!held.empty() && (held.size() > 6 || random() % 3 == 0)) {
      ledger.release(slot, held.back());
      mine -= held.back();
      held.pop_back();
    } else {
      const std::uint64_t bytes = (1 + random() % max_chunk_mib) * MiB;
      if (ledger.charge(slot, bytes).verdict == Verdict::admitted) {
        held.push_back(bytes);
        mine += bytes;
      } else {
        ++refusals;
      }
    }
    if (ledger.file().layout().header.total_charged.load() > kLimit) return kChildSawOverLimit;
    // Hand the core over: on a machine with fewer cores than racers, each would otherwise run its rounds within
    // one time slice, one after the other, and never meet the others.
    std::this_thread::yield();
    if (ledger.charged(slot) != mine) return kChildLostCount;
  }
  ledger.leave(slot);
  if (refusals_out >= 0 && ::write(refusals_out, &refusals, sizeof refusals) != sizeof refusals) return kChildLostCount;
  return kChildOk;
}

// Chunks of up to limit / processes, so that together they keep running into the limit.
void race_processes(int processes, int rounds) {
  const std::uint64_t max_chunk_mib = kLimit / MiB / static_cast<std::uint64_t>(processes);
  const TempDirectory dir;
  // All start at once: each waits for the parent to close the pipe, or the first could finish before the last began.
  int start[2], refusals[2];
  ASSERT_EQ(::pipe(start), 0);
  ASSERT_EQ(::pipe(refusals), 0);
  std::vector<pid_t> children;
  for (int i = 0; i < processes; ++i) {
    const pid_t child = ::fork();
    if (child == 0) {
      ::close(start[1]);
      char byte = 0;
      if (::read(start[0], &byte, 1) != 0) ::_exit(2);
      ::_exit(race(dir.path(), rounds, 1000 + static_cast<std::uint64_t>(i), max_chunk_mib, refusals[1]));
    }
    children.push_back(child);
  }
  ::close(start[0]);
  ::close(start[1]);
  ::close(refusals[1]);
  // Watch from outside while they race: consistent snapshots never sum past the limit.
  bool running = true;
  std::uint64_t observations = 0, highest = 0;
  while (running) {
    running = false;
    for (pid_t child : children) running = running || ::kill(child, 0) == 0;
    try {
      const LedgerSnapshot snapshot = read_snapshot(LedgerFile::open_read_only(dir.path() + "/plimsoll-ledger-" + kUuid));
      if (!snapshot.consistent) continue;
      std::uint64_t sum = 0;
      for (const ProcessRow& row : snapshot.processes) sum += row.charged;
      ASSERT_LE(sum, kLimit);
      ASSERT_EQ(sum, snapshot.charged) << "the totals match the entries";
      highest = std::max(highest, sum);
      ++observations;
    } catch (const std::exception&) {
      // not created yet
    }
    std::this_thread::yield();
    // A child that exited stays a zombie until reaped: reap as they end.
    for (pid_t child : children) {
      int status = 0;
      if (::waitpid(child, &status, WNOHANG) == child) {
        EXPECT_TRUE(WIFEXITED(status)) << "child " << child << " was killed";
        EXPECT_EQ(WEXITSTATUS(status), kChildOk) << "child " << child;
      }
    }
  }
  for (pid_t child : children) {
    int status = 0;
    if (::waitpid(child, &status, 0) == child) {
      EXPECT_EQ(WEXITSTATUS(status), kChildOk) << "child " << child;
    }
  }
  EXPECT_GT(observations, 0u);
  long total_refusals = 0;
  for (int count = 0; ::read(refusals[0], &count, sizeof count) == sizeof count;) total_refusals += count;
  ::close(refusals[0]);
  EXPECT_GT(total_refusals, 0) << "the racers never met the limit: the test would not see a breach";
  const LedgerSnapshot end = read_snapshot(LedgerFile::open_read_only(dir.path() + "/plimsoll-ledger-" + kUuid));
  EXPECT_EQ(end.charged, 0u);
  EXPECT_TRUE(end.processes.empty());
}

TEST(ThreadsSharing, TwoProcessesRacingNeverPassTheLimit) { race_processes(2, 10000); }

TEST(ThreadsSharing, EightProcessesRacingNeverPassTheLimit) { race_processes(8, 5000); }

TEST(ThreadsSharing, ProcessesKilledAtRandomPointsAreReclaimed) {
  const TempDirectory dir;
  std::mt19937_64 random(7);
  for (int victim = 0; victim < 12; ++victim) {
    const pid_t child = ::fork();
    if (child == 0) ::_exit(race(dir.path(), 1'000'000, static_cast<std::uint64_t>(victim), 64));
    std::this_thread::sleep_for(std::chrono::microseconds(500 + random() % 20'000));
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
  }
  Ledger ledger(LedgerFile::open_or_create(dir.path(), kUuid, kLimit));
  ledger.reclaim_dead();
  const LedgerSnapshot snapshot = read_snapshot(ledger.file());
  EXPECT_TRUE(snapshot.processes.empty());
  EXPECT_EQ(snapshot.charged, 0u) << "the totals were rebuilt from the entries";
  EXPECT_EQ(snapshot.shares, 0u);
  // And the GPU is whole again for a newcomer.
  const int slot = ledger.join(Member{.who = this_process(), .share = kLimit, .cap = kLimit, .can_trim = false,
                                      .interposed = true, .command = "after"});
  EXPECT_EQ(ledger.charge(slot, kLimit).verdict, Verdict::admitted);
}

TEST(ThreadsSharing, LockHeldByADeadProcessIsRepaired) {
  const TempDirectory dir;
  Ledger ledger(LedgerFile::open_or_create(dir.path(), kUuid, kLimit));
  const int slot = ledger.join(Member{.who = this_process(), .share = 8 * MiB, .cap = kLimit, .can_trim = false,
                                      .interposed = true, .command = "survivor"});
  ASSERT_EQ(ledger.charge(slot, 10 * MiB).verdict, Verdict::admitted);
  const pid_t child = ::fork();
  if (child == 0) {
    LedgerHeader& header = ledger.file().layout().header;
    pthread_mutex_lock(&header.mutex);
    header.sequence.fetch_add(1);               // inside, as a writer
    header.total_charged.store(123456789);       // half an update: the totals no longer match the entries
    ::raise(SIGKILL);
  }
  ::waitpid(child, nullptr, 0);
  EXPECT_EQ(ledger.charge(slot, 5 * MiB).verdict, Verdict::admitted) << "EOWNERDEAD is handled, not fatal";
  const LedgerSnapshot snapshot = read_snapshot(ledger.file());
  EXPECT_TRUE(snapshot.consistent);
  EXPECT_EQ(snapshot.repairs, 1u);
  EXPECT_EQ(snapshot.charged, 15 * MiB) << "the totals were rebuilt from the entries";
}

TEST(ThreadsSharing, EngineBorrowerGivesBackWhenAShareOwnerNeedsIt) {
  const TempDirectory dir;
  int ready[2], done[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(done), 0);
  const pid_t engine = ::fork();
  if (engine == 0) {
    // An Allocator-owning process: share 20 MiB, may borrow up to the whole GPU, answers trim requests.
    GpuShare share(kUuid, kLimit, parse_share_spec("cuda:0=20MiB:256MiB"), dir.path());
    const auto device = shared_sim_allocator(share, kLimit);
    Allocator& gpu = *device;
    const TrimResponder responder(share, [&gpu] { gpu.trim(); }, std::chrono::milliseconds(5));
    gpu.deallocate(gpu.allocate(200 * MiB));  // cached: still mapped, still charged
    const char byte = share.charged_bytes() >= 200 * MiB ? 'y' : 'n';
    if (::write(ready[1], &byte, 1) != 1) ::_exit(3);
    char wait_byte = 0;
    if (::read(done[0], &wait_byte, 1) != 1) ::_exit(4);
    ::_exit(share.charged_bytes() == 0 ? 0 : 5);
  }
  char byte = 0;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1);
  ASSERT_EQ(byte, 'y') << "the engine holds its cache";
  // A driver-governed process with a guaranteed share of 200 MiB, which the engine's cache now occupies.
  Ledger ledger(LedgerFile::open_or_create(dir.path(), kUuid, kLimit));
  const int slot = ledger.join(Member{.who = this_process(), .share = 200 * MiB, .cap = 200 * MiB, .can_trim = false,
                                      .interposed = true, .command = "owner"});
  const ChargeResult result = charge_waiting_for_trims(ledger, slot, 150 * MiB, std::chrono::seconds(20));
  EXPECT_EQ(result.verdict, Verdict::admitted);
  const LedgerSnapshot snapshot = read_snapshot(ledger.file());
  ASSERT_EQ(snapshot.processes.size(), 2u);
  const ProcessRow& engine_row = snapshot.processes[0].pid == engine ? snapshot.processes[0] : snapshot.processes[1];
  EXPECT_EQ(engine_row.trims, 1u);
  EXPECT_EQ(engine_row.trim_requests, 1u);
  EXPECT_TRUE(engine_row.can_trim);
  ASSERT_EQ(::write(done[1], "x", 1), 1);
  int status = 0;
  ::waitpid(engine, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
}

}  // namespace
}  // namespace plimsoll::sharing
