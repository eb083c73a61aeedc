// Pause and resume of a process sharing a GPU (docs/sharing.md, "Pause and resume"): the paused memory is credited
// in the ledger, another process allocates it meanwhile, a resume it blocks fails and leaves the device paused and
// resumable; `plimsoll pause PID` / `resume PID` through the ledger (request_pause / request_resume) answered by the
// process's TrimResponder, with every bad target refused with its reason; in-use bytes kept current; entries of
// processes in another pid namespace judged by their liveness lock, not their pid.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "plimsoll/allocator.hpp"
#include "plimsoll/error.hpp"
#include "plimsoll/sharing.hpp"
#include "sharing/control_requests.hpp"
#include "sharing/entry_liveness.hpp"
#include "sharing/gpu_share.hpp"
#include "sharing/ledger.hpp"
#include "sharing/ledger_snapshot.hpp"
#include "sharing/process_identity.hpp"
#include "sharing_support.hpp"

namespace plimsoll::sharing {
namespace {

using ::testing::HasSubstr;
using plimsoll::testing::error_of;
using plimsoll::testing::LiveProcess;
using plimsoll::testing::shared_sim_allocator;
using plimsoll::testing::TempDirectory;
constexpr std::uint64_t MiB = std::uint64_t{1} << 20;
constexpr const char* kUuid = "GPU-00000000-0000-0000-0000-00000000pa05";
constexpr const char* kOtherUuid = "GPU-00000000-0000-0000-0000-00000000pa06";
constexpr auto kAnswerTimeout = std::chrono::seconds(20);  // a bound for a stuck test, never reached when it works

// A child process that joins the same ledger, allocates `bytes`, reports on `ready` whether it could, and holds the
// memory until `release` is written to.
class OtherJob {
 public:
  OtherJob(const std::string& dir, std::uint64_t bytes) {
    int to_child[2], from_child[2];
    if (::pipe(to_child) != 0 || ::pipe(from_child) != 0) throw std::runtime_error("pipe");
    pid_ = ::fork();
    if (pid_ == 0) {
      char ok = 'n';
      try {
        GpuShare share(kUuid, 100 * MiB, parse_share_spec("cuda:0=40MiB:60MiB"), dir);
        auto gpu = shared_sim_allocator(share, 100 * MiB);
        void* held = gpu->try_allocate(bytes);
        ok = held != nullptr ? 'y' : 'n';
        static_cast<void>(::write(from_child[1], &ok, 1));
        char go = 0;
        static_cast<void>(::read(to_child[0], &go, 1));
        if (held != nullptr) gpu->deallocate(held);
      } catch (...) {
        static_cast<void>(::write(from_child[1], &ok, 1));
      }
      ::_exit(0);
    }
    ::close(to_child[0]);
    ::close(from_child[1]);
    release_ = to_child[1];
    ready_ = from_child[0];
  }
  bool allocated() {
    char ok = 0;
    return ::read(ready_, &ok, 1) == 1 && ok == 'y';
  }
  void finish() {
    if (pid_ <= 0) return;
    const char go = 'x';
    static_cast<void>(::write(release_, &go, 1));
    ::waitpid(pid_, nullptr, 0);
    ::close(release_);
    ::close(ready_);
    pid_ = -1;
  }
  ~OtherJob() { finish(); }

 private:
  pid_t pid_ = -1;
  int release_ = -1, ready_ = -1;
};

TEST(SharedPause, AnotherProcessUsesThePausedMemoryAndAResumeItBlocksFailsCleanly) {
  const TempDirectory dir;
  GpuShare share(kUuid, 100 * MiB, parse_share_spec("cuda:0=50MiB:100MiB"), dir.path());
  auto gpu = shared_sim_allocator(share, 100 * MiB);
  void* state = gpu->allocate(70 * MiB);
  EXPECT_GE(share.charged_bytes(), 70 * MiB);
  {
    OtherJob blocked(dir.path(), 50 * MiB);
    EXPECT_FALSE(blocked.allocated()) << "70 MiB held here: 50 more do not fit on a 100 MiB GPU";
  }
  EXPECT_GT(gpu->pause(), 0u);
  EXPECT_EQ(share.charged_bytes(), 0u) << "the ledger counts the paused memory free";

  OtherJob other(dir.path(), 50 * MiB);
  ASSERT_TRUE(other.allocated()) << "the paused memory is free for another process";
  const std::string why = error_of([&] { gpu->resume(); });
  EXPECT_THAT(why, HasSubstr("cannot resume cuda:0"));
  EXPECT_THAT(why, HasSubstr("stays paused with nothing lost"));
  EXPECT_TRUE(gpu->paused());
  EXPECT_EQ(share.charged_bytes(), 0u) << "the failed resume gave back what it had charged";

  other.finish();
  gpu->resume();
  EXPECT_TRUE(gpu->owns(state));
  EXPECT_GE(share.charged_bytes(), 70 * MiB);
  gpu->deallocate(state);
}

TEST(SharedPause, PauseAndResumeByPidThroughTheLedger) {
  const TempDirectory dir;
  GpuShare share(kUuid, 100 * MiB, parse_share_spec("cuda:0=50MiB:100MiB"), dir.path());
  auto gpu = shared_sim_allocator(share, 100 * MiB);
  const TrimResponder responder(share, allocator_hooks(*gpu), std::chrono::milliseconds(5));
  void* block = gpu->allocate(30 * MiB);

  const auto paused = request_pause(::getpid(), false, kAnswerTimeout, dir.path());
  ASSERT_EQ(paused.size(), 1u);
  EXPECT_TRUE(paused[0].done) << paused[0].message;
  EXPECT_EQ(paused[0].gpu_uuid, kUuid);
  EXPECT_THAT(paused[0].message, HasSubstr("paused: "));
  EXPECT_TRUE(gpu->paused());
  EXPECT_EQ(share.charged_bytes(), 0u);
  const nlohmann::json row = to_json(read_snapshot(LedgerFile::open_read_only(dir.path() + "/plimsoll-ledger-" +
                                                                                std::string(kUuid))))["processes"][0];
  EXPECT_EQ(row["paused"], true);
  EXPECT_GE(row["paused_bytes"].get<std::uint64_t>(), 30 * MiB);
  EXPECT_EQ(row["reserved_bytes"], 0u);

  const auto twice = request_pause(::getpid(), false, kAnswerTimeout, dir.path());
  ASSERT_EQ(twice.size(), 1u);
  EXPECT_FALSE(twice[0].done);
  EXPECT_THAT(twice[0].message, HasSubstr("paused already"));

  const auto resumed = request_resume(::getpid(), kAnswerTimeout, dir.path());
  ASSERT_EQ(resumed.size(), 1u);
  EXPECT_TRUE(resumed[0].done) << resumed[0].message;
  EXPECT_FALSE(gpu->paused());
  EXPECT_TRUE(gpu->owns(block));
  const auto again = request_resume(::getpid(), kAnswerTimeout, dir.path());
  EXPECT_FALSE(again[0].done);
  EXPECT_THAT(again[0].message, HasSubstr("not paused"));
  gpu->deallocate(block);
}

TEST(SharedPause, RequestsToProcessesThatCannotAnswerAreRefusedWithTheReason) {
  const TempDirectory dir;
  Ledger ledger(LedgerFile::open_or_create(dir.path(), kUuid, 100 * MiB));
  LiveProcess ungoverned;
  EXPECT_THAT(error_of([&] { request_pause(ungoverned.pid(), false, kAnswerTimeout, dir.path()); }),
              HasSubstr("it is not governed"));
  LiveProcess gone;
  const int gone_pid = gone.pid();
  gone.kill();
  EXPECT_THAT(error_of([&] { request_resume(gone_pid, kAnswerTimeout, dir.path()); }),
              HasSubstr("no such process is running"));
  EXPECT_THAT(error_of([&] { request_pause(0, false, kAnswerTimeout, dir.path()); }), HasSubstr("not a process id"));

  LiveProcess interposed;
  ledger.join(Member{.who = interposed.identity(), .share = 10 * MiB, .cap = 10 * MiB, .can_trim = false,
                     .interposed = true, .command = "jax"});
  EXPECT_THAT(error_of([&] { request_pause(interposed.pid(), false, kAnswerTimeout, dir.path()); }),
              HasSubstr("governed at the CUDA driver"));

  LiveProcess silent;  // an engine entry whose process never answers
  ledger.join(Member{.who = silent.identity(), .share = 10 * MiB, .cap = 10 * MiB, .can_trim = true,
                     .interposed = false, .command = "silent"});
  const std::string timeout = error_of([&] { request_pause(silent.pid(), false, std::chrono::milliseconds(30), dir.path()); });
  EXPECT_THAT(timeout, HasSubstr("did not answer the pause request within 30 ms"));
}

TEST(SharedPause, OnlyEntriesOfThisPidNamespaceAreTargeted) {
  const TempDirectory dir;
  GpuShare share(kUuid, 100 * MiB, parse_share_spec("cuda:0=50MiB:100MiB"), dir.path());
  auto gpu = shared_sim_allocator(share, 100 * MiB);
  const TrimResponder responder(share, allocator_hooks(*gpu), std::chrono::milliseconds(5));
  // Another GPU's ledger holds a process of a container whose pid happens to equal ours.
  Ledger other_gpu(LedgerFile::open_or_create(dir.path(), kOtherUuid, 100 * MiB));
  const int slot = other_gpu.join(Member{.who = this_process(), .share = 10 * MiB, .cap = 10 * MiB, .can_trim = true,
                                         .interposed = false, .command = "container"});
  LedgerEntry& foreign = other_gpu.file().layout().entries[slot];
  foreign.pid_namespace.store(this_pid_namespace() + 1);

  const auto paused = request_pause(::getpid(), false, kAnswerTimeout, dir.path());
  ASSERT_EQ(paused.size(), 1u) << "the container's pid names another process";
  EXPECT_EQ(paused[0].gpu_uuid, kUuid);
  EXPECT_TRUE(paused[0].done) << paused[0].message;
  EXPECT_EQ(foreign.control_request.load(), 0u) << "nothing was posted to the container's process";
  EXPECT_TRUE(request_resume(::getpid(), kAnswerTimeout, dir.path())[0].done);

  LiveProcess elsewhere;  // only an entry of another namespace has this pid
  const int its_slot = other_gpu.join(Member{.who = elsewhere.identity(), .share = 10 * MiB, .cap = 10 * MiB,
                                             .can_trim = true, .interposed = false, .command = "container"});
  other_gpu.file().layout().entries[its_slot].pid_namespace.store(this_pid_namespace() + 1);
  EXPECT_THAT(error_of([&] { request_pause(elsewhere.pid(), false, kAnswerTimeout, dir.path()); }),
              HasSubstr("is in another pid namespace; run plimsoll pause inside that container"));
  EXPECT_EQ(other_gpu.file().layout().entries[its_slot].control_request.load(), 0u);
}

TEST(SharedPause, EveryTargetIsCheckedBeforeAnyRequestIsPosted) {
  const TempDirectory dir;
  Ledger engine_gpu(LedgerFile::open_or_create(dir.path(), kUuid, 100 * MiB));  // read first (name order)
  Ledger driver_gpu(LedgerFile::open_or_create(dir.path(), kOtherUuid, 100 * MiB));
  LiveProcess job;
  const int slot = engine_gpu.join(Member{.who = job.identity(), .share = 10 * MiB, .cap = 10 * MiB, .can_trim = true,
                                          .interposed = false, .command = "job"});
  driver_gpu.join(Member{.who = job.identity(), .share = 10 * MiB, .cap = 10 * MiB, .can_trim = false,
                         .interposed = true, .command = "job"});
  EXPECT_THAT(error_of([&] { request_pause(job.pid(), false, kAnswerTimeout, dir.path()); }),
              HasSubstr("governed at the CUDA driver"));
  EXPECT_EQ(engine_gpu.file().layout().entries[slot].control_request.load(), 0u)
      << "refused, so no GPU may be asked to pause";
}

TEST(SharedPause, ATimeoutReportsTheAnswersAndWithdrawsTheRequest) {
  const TempDirectory dir;
  Ledger ledger(LedgerFile::open_or_create(dir.path(), kUuid, 100 * MiB));
  LiveProcess silent;
  const int slot = ledger.join(Member{.who = silent.identity(), .share = 10 * MiB, .cap = 10 * MiB, .can_trim = true,
                                      .interposed = false, .command = "silent"});
  try {
    request_pause(silent.pid(), false, std::chrono::milliseconds(30), dir.path());
    ADD_FAILURE() << "no answer came, so the request must time out";
  } catch (const ControlTimeout& timeout) {
    ASSERT_EQ(timeout.outcomes().size(), 1u);
    EXPECT_EQ(timeout.outcomes()[0].gpu_uuid, kUuid);
    EXPECT_FALSE(timeout.outcomes()[0].answered);
    EXPECT_THAT(timeout.outcomes()[0].message, HasSubstr("withdrawn"));
  }
  EXPECT_FALSE(pending_control(ledger.file().layout().entries[slot]))
      << "a process answering late finds nothing to carry out";
}

TEST(SharedPause, AProcessLeavingBeforeItAnswersIsNotAnsweredNotRefused) {
  const TempDirectory dir;
  Ledger ledger(LedgerFile::open_or_create(dir.path(), kUuid, 100 * MiB));
  LiveProcess leaving;
  const int slot = ledger.join(Member{.who = leaving.identity(), .share = 10 * MiB, .cap = 10 * MiB,
                                      .can_trim = true, .interposed = false, .command = "leaving"});
  std::thread leaves([&] {
    const LedgerEntry& entry = ledger.file().layout().entries[slot];
    while (entry.control_request.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ledger.leave(slot);
  });
  const auto outcomes = request_pause(leaving.pid(), false, kAnswerTimeout, dir.path());
  leaves.join();
  ASSERT_EQ(outcomes.size(), 1u);
  EXPECT_FALSE(outcomes[0].done);
  EXPECT_FALSE(outcomes[0].answered);
  EXPECT_THAT(outcomes[0].message, HasSubstr("before answering"));
}

TEST(SharedPause, AWithdrawnRequestIsNotPendingAndAnAnsweredOneCannotBeWithdrawn) {
  const TempDirectory dir;
  Ledger ledger(LedgerFile::open_or_create(dir.path(), kUuid, 100 * MiB));
  LiveProcess job;
  LedgerEntry& entry = ledger.file().layout().entries[ledger.join(Member{
      .who = job.identity(), .share = MiB, .cap = MiB, .can_trim = true, .interposed = false, .command = "job"})];
  const std::uint64_t first = post_control(entry, ControlKind::pause);
  EXPECT_FALSE(withdraw_control(entry, first, ControlKind::resume)) << "not the request posted";
  EXPECT_TRUE(withdraw_control(entry, first, ControlKind::pause));
  EXPECT_FALSE(pending_control(entry));
  const std::uint64_t second = post_control(entry, ControlKind::pause);
  answer_control(entry, second, ControlStatus::done, "paused");
  EXPECT_FALSE(withdraw_control(entry, second, ControlKind::pause));
  EXPECT_GT(post_control(entry, ControlKind::resume), second) << "sequences go on past the last answer";
}

TEST(SharedPause, ATrimHookThatThrowsDoesNotStopPauseRequestsOrInUse) {
  const TempDirectory dir;
  GpuShare share(kUuid, 100 * MiB, parse_share_spec("cuda:0=50MiB:100MiB"), dir.path());
  auto gpu = shared_sim_allocator(share, 100 * MiB);
  ShareHooks hooks = allocator_hooks(*gpu);
  hooks.trim = [] { throw std::runtime_error("trim failed (test)"); };
  LedgerEntry& entry = share.impl().ledger.file().layout().entries[share.impl().slot];
  entry.trim_wanted.store(10 * MiB);  // another process asked for memory back
  void* block = gpu->allocate(5 * MiB);
  const std::uint64_t sequence = post_control(entry, ControlKind::pause);
  EXPECT_THROW(share.honour_requests(hooks), std::runtime_error) << "the trim's error is still reported";
  const auto answer = answer_to(entry, sequence);
  ASSERT_TRUE(answer) << "the pause was answered despite the failing trim";
  EXPECT_EQ(answer->status, ControlStatus::done) << answer->message;
  EXPECT_TRUE(gpu->paused());
  EXPECT_EQ(entry.in_use.load(), gpu->usage().in_use_bytes);
  gpu->resume();
  gpu->deallocate(block);
}

TEST(SharedPause, TheLedgerFollowsAPauseOrResumeTheProcessMadeItself) {
  const TempDirectory dir;
  GpuShare share(kUuid, 100 * MiB, parse_share_spec("cuda:0=50MiB:100MiB"), dir.path());
  auto gpu = shared_sim_allocator(share, 100 * MiB);
  const ShareHooks hooks = allocator_hooks(*gpu);
  const LedgerEntry& entry = share.impl().ledger.file().layout().entries[share.impl().slot];
  void* block = gpu->allocate(8 * MiB);
  gpu->pause();  // by the process itself, not through the ledger
  share.honour_requests(hooks);  // one responder period
  EXPECT_NE(entry.flags.load() & kEntryPaused, 0u) << "`plimsoll top` shows it paused";
  EXPECT_EQ(entry.paused_bytes.load(), gpu->paused_bytes());
  EXPECT_GE(entry.paused_bytes.load(), 8 * MiB);
  gpu->resume();
  share.honour_requests(hooks);
  EXPECT_EQ(entry.flags.load() & kEntryPaused, 0u);
  EXPECT_EQ(entry.paused_bytes.load(), 0u);
  gpu->deallocate(block);
}

TEST(SharedPause, PostingOpensOnlyALedgerThatExists) {
  const TempDirectory dir;
  const std::string path = ledger_path(dir.path(), kUuid);
  EXPECT_THROW(LedgerFile::open_existing(path), Error);
  EXPECT_NE(::access(path.c_str(), F_OK), 0) << "a removed ledger is not made again by a pause command";
  { const LedgerFile made = LedgerFile::open_or_create(dir.path(), kUuid, 100 * MiB); }
  const LedgerFile opened = LedgerFile::open_existing(path);
  EXPECT_TRUE(opened.writable());
}

TEST(SharedPause, AResponderWithoutPauseHooksAnswersWhyAndInUseIsKeptCurrent) {
  const TempDirectory dir;
  GpuShare share(kUuid, 100 * MiB, parse_share_spec("cuda:0=50MiB:100MiB"), dir.path());
  auto gpu = shared_sim_allocator(share, 100 * MiB);
  {
    const TrimResponder trims_only(share, [&] { gpu->trim(); }, std::chrono::milliseconds(5));
    const auto outcome = request_pause(::getpid(), true, kAnswerTimeout, dir.path());
    ASSERT_EQ(outcome.size(), 1u);
    EXPECT_FALSE(outcome[0].done);
    EXPECT_THAT(outcome[0].message, HasSubstr("no pause hook"));
  }
  void* block = gpu->allocate(12 * MiB + 100);
  const TrimResponder responder(share, allocator_hooks(*gpu), std::chrono::milliseconds(5));
  const auto& entry = share.impl().ledger.file().layout().entries[share.impl().slot];
  const auto deadline = std::chrono::steady_clock::now() + kAnswerTimeout;
  while (entry.in_use.load() != gpu->usage().in_use_bytes && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(entry.in_use.load(), gpu->usage().in_use_bytes) << "the responder writes the allocator's in-use bytes";
  EXPECT_GT(entry.in_use.load(), 12 * MiB);
  EXPECT_LT(entry.in_use.load(), entry.charged.load() + 1);
  // The contents of a simulated device cannot be kept: the process answers with the engine's reason.
  const auto outcome = request_pause(::getpid(), true, kAnswerTimeout, dir.path());
  EXPECT_FALSE(outcome[0].done);
  EXPECT_THAT(outcome[0].message, HasSubstr("pause it without keeping them"));
  gpu->deallocate(block);
}

TEST(EntryLiveness, AnotherPidNamespaceIsJudgedByTheLivenessLockNotThePid) {
  const TempDirectory dir;
  Ledger ledger(LedgerFile::open_or_create(dir.path(), kUuid, 100 * MiB));
  LiveProcess holder;
  const int slot = ledger.join(Member{.who = holder.identity(), .share = 10 * MiB, .cap = 10 * MiB,
                                      .can_trim = true, .interposed = false, .command = "container"});
  LedgerEntry& entry = ledger.file().layout().entries[slot];
  ASSERT_NE(entry.flags.load() & kEntryLivenessLock, 0u) << "the joiner holds its liveness lock";
  ASSERT_NE(entry.pid_namespace.load(), 0u);
  const LedgerFile reader = LedgerFile::open_read_only(ledger.file().path());
  EXPECT_TRUE(entry_alive(reader, slot, this_pid_namespace()));

  // As a process in another namespace sees it: the pid means nothing there (here it even names a dead process),
  // and the lock, held by the joiner's open file, says it is alive.
  entry.pid_namespace.store(this_pid_namespace() + 1);
  holder.kill();
  EXPECT_TRUE(entry_alive(reader, slot, this_pid_namespace())) << "not judged dead by a pid of another namespace";
  Ledger another_process(LedgerFile::open_or_create(dir.path(), kUuid, 100 * MiB));  // its own open file
  EXPECT_EQ(another_process.reclaim_dead(), 0u);
  EXPECT_NE(entry.pid.load(), 0);

  // The lock goes when its holder's file is closed (the process died): the entry is then reclaimed.
  ledger.file().drop_liveness_lock(slot);
  EXPECT_FALSE(entry_alive(reader, slot, this_pid_namespace()));
  EXPECT_EQ(another_process.reclaim_dead(), 1u);
  EXPECT_EQ(entry.pid.load(), 0);

  // Without a lock, an entry from another namespace is never judged dead.
  LiveProcess unlocked;
  const int other = ledger.join(Member{.who = unlocked.identity(), .share = 10 * MiB, .cap = 10 * MiB,
                                       .can_trim = true, .interposed = false, .command = "old"});
  LedgerEntry& old_entry = ledger.file().layout().entries[other];
  old_entry.flags.fetch_and(~kEntryLivenessLock);
  old_entry.pid_namespace.store(this_pid_namespace() + 1);
  unlocked.kill();
  EXPECT_TRUE(entry_alive(reader, other, this_pid_namespace()));
}

}  // namespace
}  // namespace plimsoll::sharing
