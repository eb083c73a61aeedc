// A GPU's ledger (src/sharing): the file (created whole, checked on open: corrupt, older-version and unwritable
// files are refused with the reason), joining with shares, charging against caps, the limit and guaranteed shares,
// dead processes' entries reclaimed (pid plus start time), trim requests, snapshots, and GpuShare under an Allocator.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "plimsoll/allocator.hpp"
#include "plimsoll/error.hpp"
#include "plimsoll/sharing.hpp"
#include "sharing/gpu_share.hpp"
#include "sharing/ledger.hpp"
#include "sharing/ledger_scan.hpp"
#include "sharing/ledger_snapshot.hpp"
#include "sharing_support.hpp"

namespace plimsoll::sharing {
namespace {

using ::testing::HasSubstr;
using plimsoll::testing::error_of;
using plimsoll::testing::LiveProcess;
using plimsoll::testing::shared_sim_allocator;
using plimsoll::testing::TempDirectory;
constexpr std::uint64_t MiB = std::uint64_t{1} << 20;
constexpr const char* kUuid = "GPU-00000000-1111-2222-3333-444444444444";

Member member(const ProcessIdentity& who, std::uint64_t share, std::uint64_t cap, bool can_trim = false) {
  return Member{.who = who, .share = share, .cap = cap, .can_trim = can_trim, .interposed = !can_trim,
                .command = "test"};
}

TEST(LedgerFile, CreatedWholeAndReopened) {
  const TempDirectory dir;
  {
    const LedgerFile file = LedgerFile::open_or_create(dir.path(), kUuid, 1024 * MiB);
    EXPECT_EQ(file.path(), dir.path() + "/plimsoll-ledger-" + kUuid);
    EXPECT_EQ(file.layout().header.limit_bytes, 1024 * MiB);
    EXPECT_EQ(file.layout().header.version, kLedgerVersion);
  }
  // The second opener finds the first one's ledger, whatever device size it says (the file is the truth).
  const LedgerFile again = LedgerFile::open_or_create(dir.path(), kUuid, 5 * MiB);
  EXPECT_EQ(again.layout().header.device_bytes, 1024 * MiB);
  EXPECT_EQ(std::filesystem::status(again.path()).permissions() & std::filesystem::perms::others_write,
            std::filesystem::perms::others_write) << "every job sharing the GPU must be able to write it";
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 1) << "no temporary file left";
}

TEST(LedgerFile, BadUuidIsRefused) {
  const TempDirectory dir;
  EXPECT_THROW(LedgerFile::open_or_create(dir.path(), "", MiB), InvalidArgument);
  EXPECT_THROW(LedgerFile::open_or_create(dir.path(), "GPU/../../etc", MiB), InvalidArgument);
}

// Damages a fresh ledger with `damage`, then checks that opening it fails naming the file and `expected`.
void expect_refused(const std::function<void(LedgerFileLayout&, const std::string&)>& damage, const char* expected) {
  const TempDirectory dir;
  std::string path;
  {
    const LedgerFile file = LedgerFile::open_or_create(dir.path(), kUuid, 1024 * MiB);
    path = file.path();
    damage(file.layout(), path);
  }
  const std::string write_error = error_of([&] { LedgerFile::open_or_create(dir.path(), kUuid, 1024 * MiB); });
  EXPECT_THAT(write_error, HasSubstr(path));
  EXPECT_THAT(write_error, HasSubstr(expected));
  EXPECT_THAT(write_error, HasSubstr("remove the file"));
  EXPECT_THAT(error_of([&] { LedgerFile::open_read_only(path); }), HasSubstr(expected));
}

TEST(LedgerFile, CorruptMagicIsRefused) {
  expect_refused([](LedgerFileLayout& l, const std::string&) { std::memcpy(l.header.magic, "garbage!", 8); },
                 "magic");
}

TEST(LedgerFile, OlderVersionIsRefused) {
  expect_refused(
      [](LedgerFileLayout& l, const std::string&) {
        l.header.version = 0;
        l.header.checksum = header_checksum(l.header);
      },
      "format version 0");
}

TEST(LedgerFile, DamagedHeaderFailsItsChecksum) {
  expect_refused([](LedgerFileLayout& l, const std::string&) { l.header.limit_bytes /= 2; }, "checksum");
}

TEST(LedgerFile, TruncatedFileIsRefused) {
  expect_refused([](LedgerFileLayout&, const std::string& path) { ::truncate(path.c_str(), 100); }, "shorter");
  expect_refused([](LedgerFileLayout&, const std::string& path) { ::truncate(path.c_str(), 100000); }, "bytes where");
}

TEST(LedgerFile, ImpossibleEntryIsRefused) {
  expect_refused(
      [](LedgerFileLayout& l, const std::string&) {
        l.entries[3].pid.store(42);
        l.entries[3].cap.store(10);
        l.entries[3].charged.store(l.header.limit_bytes + 1);
      },
      "impossible numbers");
}

TEST(LedgerFile, EmptyFileIsRefused) {
  const TempDirectory dir;
  std::ofstream(dir.path() + "/plimsoll-ledger-" + kUuid).flush();
  EXPECT_THAT(error_of([&] { LedgerFile::open_or_create(dir.path(), kUuid, MiB); }), HasSubstr("0 bytes"));
}

TEST(LedgerFile, UnwritableFileIsRefusedWithTheFix) {
  const TempDirectory dir;
  std::string path;
  {
    const LedgerFile file = LedgerFile::open_or_create(dir.path(), kUuid, 1024 * MiB);
    path = file.path();
  }
  ASSERT_EQ(::chmod(path.c_str(), 0444), 0);
  ASSERT_EQ(::chmod(dir.path().c_str(), 0777), 0);
  // Root writes any file: check as an unprivileged user in a child when the test runs as root.
  int pipe_ends[2];
  ASSERT_EQ(::pipe(pipe_ends), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(pipe_ends[0]);
    if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) ::_exit(3);
    const std::string message = error_of([&] { LedgerFile::open_or_create(dir.path(), kUuid, MiB); });
    if (::write(pipe_ends[1], message.data(), message.size()) < 0) ::_exit(4);
    ::_exit(0);
  }
  ::close(pipe_ends[1]);
  std::string message;
  char buffer[1024];
  for (ssize_t got; (got = ::read(pipe_ends[0], buffer, sizeof buffer)) > 0;)
    message.append(buffer, static_cast<std::size_t>(got));
  ::close(pipe_ends[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the child could not drop privileges";
  EXPECT_THAT(message, HasSubstr("for writing"));
  EXPECT_THAT(message, HasSubstr("PLIMSOLL_LEDGER_DIR"));
}

TEST(LedgerFile, UnwritableDirectoryIsRefusedWithTheFix) {
  EXPECT_THAT(error_of([] { LedgerFile::open_or_create("/nonexistent/plimsoll", kUuid, MiB); }),
              HasSubstr("cannot create the GPU ledger"));
}

TEST(Ledger, ChargesWithinCapAndCountsRefusals) {
  const TempDirectory dir;
  Ledger ledger(LedgerFile::open_or_create(dir.path(), kUuid, 100 * MiB));
  const int slot = ledger.join(member(this_process(), 20 * MiB, 40 * MiB));
  EXPECT_EQ(ledger.charge(slot, 30 * MiB).verdict, Verdict::admitted);
  const ChargeResult refused = ledger.charge(slot, 11 * MiB);
  EXPECT_EQ(refused.verdict, Verdict::over_cap);
  EXPECT_EQ(refused.headroom, 10 * MiB);
  ledger.release(slot, 30 * MiB);
  EXPECT_EQ(ledger.charged(slot), 0u);
  const LedgerSnapshot snapshot = read_snapshot(ledger.file());
  ASSERT_EQ(snapshot.processes.size(), 1u);
  EXPECT_EQ(snapshot.processes[0].refusals, 1u);
  EXPECT_EQ(snapshot.processes[0].peak, 30 * MiB);
  ledger.leave(slot);
  EXPECT_TRUE(read_snapshot(ledger.file()).processes.empty());
}

TEST(Ledger, SharesCannotPassTheLimit) {
  const TempDirectory dir;
  const LiveProcess other;
  Ledger ledger(LedgerFile::open_or_create(dir.path(), kUuid, 100 * MiB));
  ledger.join(member(other.identity(), 70 * MiB, 70 * MiB));
  const std::string error = error_of([&] { ledger.join(member(this_process(), 40 * MiB, 40 * MiB)); });
  EXPECT_THAT(error, HasSubstr("does not fit"));
  EXPECT_THAT(error, HasSubstr("ask for at most 30.00 MiB"));
  EXPECT_THAT(error, HasSubstr("pid " + std::to_string(other.pid())));
  EXPECT_THROW(ledger.join(member(this_process(), 50 * MiB, 200 * MiB)), InvalidArgument) << "cap above the GPU";
}

TEST(Ledger, TheSameProcessCannotJoinTwice) {
  const TempDirectory dir;
  Ledger ledger(LedgerFile::open_or_create(dir.path(), kUuid, 100 * MiB));
  ledger.join(member(this_process(), 10 * MiB, 10 * MiB));
  EXPECT_THROW(ledger.join(member(this_process(), 10 * MiB, 10 * MiB)), InvalidState);
}

TEST(Ledger, DeadProcessEntryIsReclaimedAndItsMemoryCountsFree) {
  const TempDirectory dir;
  LiveProcess victim;
  Ledger ledger(LedgerFile::open_or_create(dir.path(), kUuid, 100 * MiB));
  const int victim_slot = ledger.join(member(victim.identity(), 50 * MiB, 90 * MiB));
  ASSERT_EQ(ledger.charge(victim_slot, 90 * MiB).verdict, Verdict::admitted);
  const int slot = ledger.join(member(this_process(), 10 * MiB, 50 * MiB));
  EXPECT_EQ(ledger.charge(slot, 10 * MiB).verdict, Verdict::admitted);
  EXPECT_EQ(ledger.charge(slot, 1 * MiB).verdict, Verdict::device_full);
  victim.kill();
  // The refusal path removes the dead entry and decides again (once the interval since the last look passed).
  std::this_thread::sleep_for(Ledger::kReclaimInterval + std::chrono::milliseconds(5));
  EXPECT_EQ(ledger.charge(slot, 40 * MiB).verdict, Verdict::admitted);
  const LedgerSnapshot snapshot = read_snapshot(ledger.file());
  EXPECT_EQ(snapshot.processes.size(), 1u);
  EXPECT_EQ(snapshot.charged, 50 * MiB);
  EXPECT_EQ(snapshot.reclaimed, 1u);
}

TEST(Ledger, ReusedPidWithAnotherStartTimeIsNotTheSameProcess) {
  const TempDirectory dir;
  Ledger ledger(LedgerFile::open_or_create(dir.path(), kUuid, 100 * MiB));
  ProcessIdentity impostor = this_process();
  impostor.start_time += 1;  // our pid, but an earlier process that had it
  ledger.join(member(impostor, 60 * MiB, 60 * MiB));
  const int slot = ledger.join(member(this_process(), 60 * MiB, 60 * MiB));  // the old entry is reclaimed first
  EXPECT_EQ(ledger.charge(slot, 60 * MiB).verdict, Verdict::admitted);
  EXPECT_EQ(read_snapshot(ledger.file()).processes.size(), 1u);
}

TEST(Ledger, UnderShareRefusalAsksCanTrimBorrowersAndTheyAnswer) {
  const TempDirectory dir;
  const LiveProcess borrower;
  Ledger ledger(LedgerFile::open_or_create(dir.path(), kUuid, 100 * MiB));
  const int lender = ledger.join(member(this_process(), 50 * MiB, 50 * MiB));
  const int engine = ledger.join(member(borrower.identity(), 30 * MiB, 100 * MiB, /*can_trim=*/true));
  ASSERT_EQ(ledger.charge(engine, 90 * MiB).verdict, Verdict::admitted) << "an engine may borrow unused shares";
  EXPECT_FALSE(ledger.trim_requested(engine));
  const ChargeResult refused = ledger.charge(lender, 20 * MiB);
  EXPECT_EQ(refused.verdict, Verdict::needs_trim);
  EXPECT_EQ(refused.trims_asked, 1u);
  EXPECT_TRUE(ledger.trim_requested(engine));
  // The engine gives back what it borrowed from the share, and says so.
  ledger.release(engine, 40 * MiB);
  ledger.trim_done(engine);
  EXPECT_FALSE(ledger.trim_requested(engine));
  EXPECT_EQ(ledger.charge(lender, 20 * MiB).verdict, Verdict::admitted);
  const LedgerSnapshot snapshot = read_snapshot(ledger.file());
  ASSERT_EQ(snapshot.processes.size(), 2u);
  EXPECT_EQ(snapshot.processes[1].trim_requests, 1u);
  EXPECT_EQ(snapshot.processes[1].trims, 1u);
}

TEST(Ledger, DriverGovernedProcessesDoNotBorrowPromisedMemory) {
  const TempDirectory dir;
  const LiveProcess other;
  Ledger ledger(LedgerFile::open_or_create(dir.path(), kUuid, 100 * MiB));
  ledger.join(member(other.identity(), 60 * MiB, 60 * MiB));
  const int slot = ledger.join(member(this_process(), 20 * MiB, 100 * MiB));
  EXPECT_EQ(ledger.charge(slot, 40 * MiB).verdict, Verdict::admitted);  // 20 of its share + 20 unshared
  EXPECT_EQ(ledger.charge(slot, 1 * MiB).verdict, Verdict::shares_reserved);
}

TEST(Ledger, JoinIgnoresCountersAHalfDoneLeaveLeftBehind) {
  const TempDirectory dir;
  Ledger ledger(LedgerFile::open_or_create(dir.path(), kUuid, 100 * MiB));
  LedgerEntry& stale = ledger.file().layout().entries[0];  // freed (pid 0) by a process that died mid-leave
  stale.charged.store(50 * MiB);
  stale.refusals.store(7);
  const int slot = ledger.join(member(this_process(), 10 * MiB, 10 * MiB));
  ASSERT_EQ(slot, 0);
  EXPECT_EQ(ledger.charged(slot), 0u);
  EXPECT_EQ(read_snapshot(ledger.file()).processes.at(0).refusals, 0u);
}

TEST(Ledger, ContextIsChargedEvenPastTheCapAndNeverReleased) {
  const TempDirectory dir;
  Ledger ledger(LedgerFile::open_or_create(dir.path(), kUuid, 100 * MiB));
  const int slot = ledger.join(member(this_process(), 10 * MiB, 10 * MiB));
  ledger.charge_unconditionally(slot, 12 * MiB, true);
  EXPECT_EQ(ledger.charged(slot), 12 * MiB);
  EXPECT_EQ(ledger.charge(slot, 1).verdict, Verdict::over_cap);
  ledger.release(slot, 100 * MiB);
  EXPECT_EQ(ledger.charged(slot), 12 * MiB) << "a release never gives back the context";
}

TEST(LedgerSnapshot, LoansSayWhoBorrowsFromWhom) {
  std::vector<ProcessRow> rows(3);
  rows[0].pid = 1, rows[0].share = 40, rows[0].charged = 10;   // lends 30
  rows[1].pid = 2, rows[1].share = 40, rows[1].charged = 30;   // lends 10
  rows[2].pid = 3, rows[2].share = 10, rows[2].charged = 60;   // borrows 50: 10 unshared, 40 from shares
  const auto loans = attribute_loans(rows, 100);
  ASSERT_EQ(loans.size(), 3u);
  EXPECT_EQ(loans[0].lender, 0);
  EXPECT_EQ(loans[0].bytes, 10u);
  EXPECT_EQ(loans[1].lender, 1);
  EXPECT_EQ(loans[1].bytes, 30u);
  EXPECT_EQ(loans[2].lender, 2);
  EXPECT_EQ(loans[2].bytes, 10u);
}

TEST(LedgerScan, ReadsEveryLedgerAndReportsUnreadableOnes) {
  const TempDirectory dir;
  EXPECT_TRUE(read_ledgers(dir.path() + "/missing").empty());
  {
    Ledger ledger(LedgerFile::open_or_create(dir.path(), kUuid, 100 * MiB));
    ledger.charge(ledger.join(member(this_process(), 10 * MiB, 20 * MiB)), 15 * MiB);
    std::ofstream(dir.path() + "/plimsoll-ledger-GPU-broken") << "not a ledger";
    std::ofstream(dir.path() + "/unrelated-file") << "x";
    const auto readings = read_ledgers(dir.path());
    ASSERT_EQ(readings.size(), 2u);  // in name order: GPU-0000... before GPU-broken
    EXPECT_FALSE(readings[1].snapshot.has_value());
    EXPECT_THAT(readings[1].error, HasSubstr("GPU-broken"));
    ASSERT_TRUE(readings[0].snapshot.has_value());
    const nlohmann::json json = to_json(*readings[0].snapshot);
    EXPECT_EQ(json["uuid"], kUuid);
    EXPECT_EQ(json["processes"][0]["reserved_bytes"], 15 * MiB);
    EXPECT_EQ(json["processes"][0]["borrowed_bytes"], 5 * MiB);
    EXPECT_EQ(json["processes"][0]["governed_by"], "driver");
    EXPECT_EQ(json["loans"][0]["lender"], "unshared");
  }
}

TEST(GpuShare, AllocatorOverTheSharedBackingStopsAtTheCap) {
  const TempDirectory dir;
  GpuShare share(kUuid, 256 * MiB, parse_share_spec("cuda:0=32MiB:80MiB"), dir.path());
  EXPECT_EQ(share.share_bytes(), 32 * MiB);
  const auto device = shared_sim_allocator(share, 256 * MiB);
  Allocator& gpu = *device;
  void* first = gpu.allocate(40 * MiB);
  EXPECT_GE(share.charged_bytes(), 40 * MiB);
  EXPECT_THROW(gpu.allocate(48 * MiB), OutOfMemory) << "the ledger refuses the map past the cap";
  // Up to the cap exactly: the heap's map ahead, which the ledger refuses, is dropped for what the request needs.
  void* up_to_the_cap = gpu.allocate(40 * MiB);
  EXPECT_EQ(share.charged_bytes(), 80 * MiB);
  gpu.deallocate(up_to_the_cap);
  gpu.deallocate(first);
  gpu.trim();
  EXPECT_EQ(share.charged_bytes(), 0u);
  void* second = gpu.allocate(60 * MiB);
  gpu.deallocate(second);
}

TEST(GpuShare, HonoursATrimRequestAtItsNextAllocation) {
  const TempDirectory dir;
  GpuShare share(kUuid, 100 * MiB, parse_share_spec("cuda:0=10MiB:100MiB"), dir.path());
  auto& impl = share.impl();
  EXPECT_FALSE(share.trim_requested());
  impl.ledger.file().layout().entries[impl.slot].trim_wanted.store(5 * MiB);
  int trims = 0;
  share.honour_trim_request([&] { ++trims; });
  share.honour_trim_request([&] { ++trims; });
  EXPECT_EQ(trims, 1);
  EXPECT_FALSE(share.trim_requested());
}

}  // namespace
}  // namespace plimsoll::sharing
