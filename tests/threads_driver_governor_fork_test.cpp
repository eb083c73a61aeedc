// The CUDA intercept's governor across fork() (docs/engine.md, "fork()"): its devices' mutex (a GPU's first use,
// held while it joins its ledger) and its allocation tables' shards, taken by the engine's fork handlers through the
// intercept's participant (integrations/cuda_intercept/governor_fork_participant.hpp). A thread parks inside a GPU's
// join (the stand-in driver's cuDeviceGetUuid) until the fork's preparation asks for the governor's locks; the main
// thread forks; the child asks for the GPU (its memory, an allocation, a free) and _exits; the parent waits with a
// deadline. Before, the governor registered nothing and the child hung on the devices' mutex (label threads: TSan).
#include <gtest/gtest.h>

#include <atomic>
#include <string>

#include "engine/fork_handlers.hpp"
#include "fork_child.hpp"
#include "integrations/cuda_intercept/governor_fork_participant.hpp"
#include "sharing/driver_governor.hpp"
#include "sharing_support.hpp"
#include "stand_in_driver.hpp"

namespace plimsoll::sharing {
namespace {

namespace cu = cuda_driver;
constexpr std::uint64_t MiB = std::uint64_t{1} << 20;

std::atomic<fork_test::ParkedHolder*> g_holder{nullptr};
std::atomic<DriverGovernor*> g_governor{nullptr};
thread_local bool t_park_in_join = false;

cu::Result parking_uuid(cu::Uuid* uuid, cu::Device device) {
  if (t_park_in_join) {
    t_park_in_join = false;
    g_holder.load()->park([] { return g_governor.load()->fork_locking(); });
  }
  return testing_support::stand_in_driver().device_get_uuid(uuid, device);
}

// As the intercept does at load: one participant for the process's life, watching the governor of the moment.
cuda_intercept::GovernorForkParticipant& participant() {
  static auto* const made = [] {
    auto* p = new cuda_intercept::GovernorForkParticipant;
    engine::register_fork_participant(*p);
    return p;
  }();
  return *made;
}

TEST(ThreadsDriverGovernorFork, ForkWhileAThreadJoinsAGpuLeavesAWorkingChild) {
  const plimsoll::testing::TempDirectory dir;
  DriverCalls calls = testing_support::stand_in_driver();
  calls.device_get_uuid = &parking_uuid;
  DriverGovernor governor({parse_share_spec("cuda:0=64MiB:128MiB")}, calls, dir.path());
  g_governor = &governor;
  participant().watch(governor);
  std::string problem;
  {
    fork_test::ParkedHolder holder([] {
      while (g_holder.load() == nullptr) std::this_thread::yield();
      t_park_in_join = true;
      (void)g_governor.load()->total_memory(0);  // the GPU's first use: joins its ledger under the devices' mutex
    });
    g_holder = &holder;
    holder.wait_until_parked();
    problem = fork_test::run_in_child([&] {
      const auto info = governor.memory_info(0, testing_support::kGpuBytes);  // the devices' mutex: hung here before
      if (!info || info->second != 128 * MiB) return 1;
      if (governor.admit(0, 4 * MiB, "cuMemAlloc") != cu::kSuccess) return 2;
      governor.remember(0x10000000, 0, 4 * MiB, false);  // an allocation table's shard
      const auto charged = governor.take(0x10000000, false);
      if (!charged) return 3;
      governor.credit(*charged);
      return 0;
    });
  }
  g_holder = nullptr;
  participant().watch_nothing();
  g_governor = nullptr;
  EXPECT_EQ(problem, "");
  // The parent goes on: its GPU joined, its books work.
  ASSERT_EQ(governor.admit(0, 4 * MiB, "cuMemAlloc"), cu::kSuccess);
  governor.cancel(0, 4 * MiB);
}

}  // namespace
}  // namespace plimsoll::sharing
