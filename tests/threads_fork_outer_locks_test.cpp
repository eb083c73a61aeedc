// The runtime's locks that take device locks under them, held across fork() as outer locks of the engine's handlers
// (docs/engine.md, "fork()"): IdleRelease's (poll() takes stats() and trim() under it) and AllocatorGroup's (the
// shared-GPU hooks trim and pause under it; add() runs when a child makes a GPU's first device). A thread parks
// holding one through OuterForkLock's seam until the fork's preparation asks for that lock; the main thread forks;
// the child uses the object and _exits; the parent waits with a deadline. Before, neither lock was held across the
// fork and the child's first call hung (label threads: TSan). And the rule beside register_outer_fork_lock (never
// register one while holding one): a thread making a shared GPU's first device under the runtime's lock while the
// main thread forks; its AllocatorGroup registered its own lock there, and the fork deadlocked.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <filesystem>
#include <memory>

#include "backings/sim_backing.hpp"
#include "engine/fork_handlers.hpp"
#include "engine/outer_fork_lock.hpp"
#include "fake_cuda_driver.hpp"
#include "fork_child.hpp"
#include "plimsoll/allocator.hpp"
#include "plimsoll/idle_release.hpp"
#include "plimsoll/runtime.hpp"
#include "runtime/allocator_group.hpp"
#include "runtime/runtime_access.hpp"
#include "sanitized.hpp"  // PLIMSOLL_TEST_UNDER_TSAN
#include "sim_device.hpp"


namespace plimsoll {
namespace {

constexpr std::uint64_t MiB = std::uint64_t{1} << 20;

std::atomic<fork_test::ParkedHolder*> g_holder{nullptr};
thread_local bool t_park_in_next_lock = false;

// OuterForkLock's seam: the holder's thread parks in the first outer lock it takes, until a fork asks for that lock.
void park_holding(engine::OuterForkLock& lock) {
  if (!t_park_in_next_lock) return;
  t_park_in_next_lock = false;
  g_holder.load()->park([&lock] { return lock.fork_asked(); });
}

// Parks a thread inside `enter` (which takes the lock under test) for the scope of the object.
class HeldOuterLock {
 public:
  template <class Enter>
  explicit HeldOuterLock(Enter enter) {
    engine::OuterForkLock::set_held_seam(&park_holding);
    holder_ = std::make_unique<fork_test::ParkedHolder>([enter] {
      while (g_holder.load() == nullptr) std::this_thread::yield();  // published below
      t_park_in_next_lock = true;
      enter();
    });
    g_holder = holder_.get();
    holder_->wait_until_parked();
  }
  ~HeldOuterLock() {
    holder_.reset();
    engine::OuterForkLock::set_held_seam(nullptr);
    g_holder = nullptr;
  }
  HeldOuterLock(const HeldOuterLock&) = delete;
  HeldOuterLock& operator=(const HeldOuterLock&) = delete;

 private:
  std::unique_ptr<fork_test::ParkedHolder> holder_;
};

std::unique_ptr<Allocator> sim_allocator() {
  return std::make_unique<Allocator>(testing_support::sim_device(), std::make_unique<backings::SimBacking>(4ull << 30));
}

int use_device(Allocator& device) {
  void* p = device.try_allocate(MiB);
  if (p == nullptr) return 10;
  device.deallocate(p);
  return device.stats().live_allocations == 0 ? 0 : 11;
}

TEST(ThreadsForkOuterLocks, ForkWhileAnIdleReleasePollsLeavesAWorkingChild) {
  auto device = sim_allocator();
  auto other = sim_allocator();
  IdleRelease release({device.get()});
  std::string problem;
  {
    HeldOuterLock held([&] { release.poll(std::chrono::steady_clock::now()); });
    problem = fork_test::run_in_child([&] {
      if (release.released_bytes() != 0) return 1;  // its lock: hung here before
      release.watch(*other);
      (void)release.poll(std::chrono::steady_clock::now());
#ifndef PLIMSOLL_TEST_UNDER_TSAN
      release.start();  // a thread of the child's own (not under TSan: see PLIMSOLL_TEST_UNDER_TSAN)
      release.stop();
#endif
      return use_device(*device);
    });
  }
  EXPECT_EQ(problem, "");
  EXPECT_EQ(use_device(*device), 0);
}

TEST(ThreadsForkOuterLocks, ForkWhileAnAllocatorGroupHookRunsLeavesAWorkingChild) {
  auto first = sim_allocator();
  auto second = sim_allocator();
  engine::OuterForkLock group_lock;  // the group's owner registers it (the runtime, in its constructor)
  engine::register_outer_fork_lock(group_lock);
  runtime::AllocatorGroup group(group_lock);
  group.add(*first);
  const ShareHooks hooks = group.hooks();
  std::string problem;
  {
    HeldOuterLock held([&] { (void)hooks.in_use(); });
    problem = fork_test::run_in_child([&] {
      group.add(*second);  // a GPU's next device, made in the child: hung here before
      (void)hooks.in_use();
      hooks.trim();
      return use_device(*second);
    });
  }
  EXPECT_EQ(problem, "");
  hooks.trim();
  EXPECT_EQ(use_device(*first), 0);
  engine::unregister_outer_fork_lock(group_lock);
}

// The hang is in the parent's fork() itself (its preparation holds the outer locks' registry and waits for the
// runtime's lock; the maker thread, holding that lock, waited for the registry to register the group's lock), so the
// deadline is an alarm that ends the test process with a message.
void fork_deadline_passed(int) {
  const char message[] = "threads_fork_outer_locks_test: fork() did not return within 20 s (deadlock)\n";
  (void)!write(2, message, sizeof message - 1);
  _exit(3);
}

TEST(ThreadsForkOuterLocks, ForkWhileAThreadMakesASharedGpusFirstDeviceLeavesAWorkingChild) {
  std::string ledger_dir = ::testing::TempDir() + "plimsoll_fork_share_XXXXXX";
  ASSERT_NE(::mkdtemp(ledger_dir.data()), nullptr);
  ::setenv("PLIMSOLL_LEDGER_DIR", ledger_dir.c_str(), 1);
  fake_cuda::Options options;
  options.capacity_bytes = 256 * fake_cuda::kMiB;
  fake_cuda::Driver driver(options);
  Config config;
  config.log_device_creation = false;
  config.gpu_shares = "cuda:0=64MiB:128MiB";
  {
    Runtime runtime(config);
    HostInfo host;
    host.total_ram_bytes = std::uint64_t{16} << 30;
    host.available_ram_bytes = std::uint64_t{8} << 30;
    runtime::RuntimeAccess::inject_driver(runtime, driver.api(), host);
    Allocator& cpu = runtime.device("cpu");
    std::string problem;
    {
      // Parks holding the runtime's lock; once the fork asks for it, joins the GPU's ledger (its AllocatorGroup).
      HeldOuterLock held([&] { (void)runtime.device("cuda:0"); });
      signal(SIGALRM, &fork_deadline_passed);
      alarm(20);
      problem = fork_test::run_in_child([&] { return use_device(runtime.device("cpu")); }, [] { alarm(0); });
      alarm(0);
      signal(SIGALRM, SIG_DFL);
    }
    EXPECT_EQ(problem, "");
    EXPECT_EQ(use_device(cpu), 0);
    EXPECT_EQ(use_device(runtime.device("cuda:0")), 0);
  }
  ::unsetenv("PLIMSOLL_LEDGER_DIR");
  std::filesystem::remove_all(ledger_dir);
}

}  // namespace
}  // namespace plimsoll
