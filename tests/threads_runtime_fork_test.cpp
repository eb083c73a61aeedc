// fork() beside the runtime's mutex (engine/fork_handlers.hpp, step 0): a thread making a device holds it (the GPU
// scan, the backing's reservation, the device's registration), and the child's first Runtime::device would wait for
// that thread, which does not exist there, forever. A thread is parked inside the (fake) driver's address
// reservation while Runtime::device("cuda:0") makes the device, under the runtime's mutex, until a fork's
// preparation begins (engine::fork_preparing(), the seam); the main thread forks; the child gets the host device
// through the runtime, allocates and frees; the parent fails the test if the child does not exit cleanly in time.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <thread>

#include "engine/fork_handlers.hpp"
#include "fake_cuda_driver.hpp"
#include "fork_child.hpp"
#include "plimsoll/runtime.hpp"
#include "runtime/runtime_access.hpp"

namespace plimsoll {
namespace {

namespace cu = cuda_driver;

std::atomic<bool> park_reservation{false}, reservation_parked{false}, release_reservation{false};
cu::Result (*real_reserve)(cu::DevicePtr*, std::size_t, std::size_t, cu::DevicePtr, unsigned long long) = nullptr;

cu::Result parking_reserve(cu::DevicePtr* pointer, std::size_t bytes, std::size_t alignment, cu::DevicePtr hint,
                           unsigned long long flags) {
  if (park_reservation.exchange(false)) {
    reservation_parked = true;
    while (!engine::fork_preparing() && !release_reservation.load()) std::this_thread::yield();
  }
  return real_reserve(pointer, bytes, alignment, hint, flags);
}

// A quiet runtime over a fake 256 MiB GPU whose address reservations go through `reserve` (the test's seam), which
// may call real_reserve.
struct FakeGpuRuntime {
  explicit FakeGpuRuntime(decltype(cu::Api::mem_address_reserve) reserve)
      : driver(options()), api(driver.api()), runtime(quiet()) {
    real_reserve = api.mem_address_reserve;
    api.mem_address_reserve = reserve;
    HostInfo host;
    host.total_ram_bytes = 16ull << 30;
    host.available_ram_bytes = 8ull << 30;
    runtime::RuntimeAccess::inject_driver(runtime, api, host);
  }
  static fake_cuda::Options options() {
    fake_cuda::Options options;
    options.capacity_bytes = 256 * fake_cuda::kMiB;
    return options;
  }
  static Config quiet() {
    Config config;
    config.log_device_creation = false;
    return config;
  }
  fake_cuda::Driver driver;
  cu::Api api;
  Runtime runtime;
};

TEST(ThreadsRuntimeFork, ForkWhileAnotherThreadMakesADeviceUnderTheRuntimeLockLeavesAWorkingChild) {
  FakeGpuRuntime fake(&parking_reserve);
  Runtime& runtime = fake.runtime;

  std::atomic<bool> maker_done{false}, maker_may_exit{false};
  park_reservation = true;
  std::thread maker([&] {
    (void)runtime.device("cuda:0");  // parked inside the reservation, under the runtime's mutex
    maker_done = true;
    while (!maker_may_exit.load()) std::this_thread::yield();  // alive until the parent is done (TSan)
  });
  while (!reservation_parked.load()) std::this_thread::yield();

  const pid_t child = fork();
  ASSERT_NE(child, -1);
  if (child == 0) {
    Allocator& cpu = runtime.device("cpu");  // the runtime's mutex: hung here before
    void* p = cpu.try_allocate(1 << 20, 1);
    if (p == nullptr) _exit(2);
    cpu.deallocate(p);
    if (cpu.stats().live_allocations != 0) _exit(3);
    _exit(0);
  }
  int status = 0;
  const bool exited = fork_test::child_exited_in_time(child, status);
  release_reservation = true;  // the parent's maker, in case the fork did not wait for it
  while (!maker_done.load()) std::this_thread::yield();
  maker_may_exit = true;
  maker.join();
  EXPECT_TRUE(exited) << "the child hung: the runtime's mutex, held by a thread that does not exist in it";
  if (exited) {
    EXPECT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "the child's check number " << WEXITSTATUS(status) << " failed";
  }
  EXPECT_FALSE(engine::fork_preparing());
  // The parent goes on: the device the maker made works.
  Allocator& gpu = runtime.device("cuda:0");
  gpu.deallocate(gpu.allocate(4 << 20));
  EXPECT_EQ(gpu.stats().live_allocations, 0u);
}


// Two logical devices over one physical backing: each device's backing is a view forwarding to the shared one, so
// a fork's preparation reaches the shared backing once per view; it locked its std::mutex twice and the forking
// process hung in fork() itself. A thread allocating on cpu/1 and reading cpu/0's stats (its host pages, without a
// device lock) meanwhile probes the lock order. The whole scenario runs in a child, so the hang is caught by the
// deadline instead of hanging the test run.
TEST(ThreadsRuntimeFork, ForkWithTwoLogicalDevicesOverOneBackingDoesNotHang) {
  const pid_t scenario = fork();
  ASSERT_NE(scenario, -1);
  if (scenario == 0) {
    Config config;
    config.log_device_creation = false;
    config.logical_devices["cpu"] = {LogicalDeviceConfig::sized(1ull << 30), LogicalDeviceConfig::sized(1ull << 30)};
    Runtime runtime(config);
    Allocator& first = runtime.device("cpu/0");
    Allocator& second = runtime.device("cpu/1");
    void* kept = first.try_allocate(1 << 20, 1);
    if (kept == nullptr) _exit(10);
    std::atomic<bool> stop{false};
    std::thread worker([&] {
      while (!stop.load()) {
        void* p = second.try_allocate(1 << 20, 1);
        if (p != nullptr) second.deallocate(p);
        (void)first.stats();
      }
    });
    int failed = 0;
    for (int round = 0; round < 20 && failed == 0; ++round) {
      const pid_t child = fork();  // hung here before
      if (child == -1) {
        failed = 11;
        break;
      }
      if (child == 0) {
        void* p = second.try_allocate(1 << 20, 1);
        if (p == nullptr) _exit(2);
        second.deallocate(p);
        first.deallocate(first.allocate(4096));
        _exit(0);
      }
      int status = 0;
      if (!fork_test::child_exited_in_time(child, status) || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        failed = 12;
    }
    stop = true;
    worker.join();
    first.deallocate(kept);
    _exit(failed);
  }
  int status = 0;
  const bool exited = fork_test::child_exited_in_time(scenario, status);
  EXPECT_TRUE(exited) << "fork() hung with two logical devices sharing one backing";
  if (exited) {
    EXPECT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "check number " << WEXITSTATUS(status) << " failed";
  }
}


// A thread that forks while it holds the runtime's mutex (a driver library's fork+exec inside Runtime::device's
// driver load, GPU scan or backing construction): the preparation took the outer lock again, and the thread
// deadlocked on itself in fork(). The fake driver's address reservation (called under the runtime's mutex) forks; the
// grandchild exits at once, as an exec would; the scenario runs in a child, so the hang is caught by the deadline.
std::atomic<int> fork_inside_reservation_result{-1};

cu::Result forking_reserve(cu::DevicePtr* pointer, std::size_t bytes, std::size_t alignment, cu::DevicePtr hint,
                           unsigned long long flags) {
  if (fork_inside_reservation_result.load() == -1) {
    const pid_t child = fork();  // hung here before: the runtime's mutex, taken again by its own holder
    if (child == 0) _exit(0);
    int status = 0;
    const bool exited = child != -1 && fork_test::child_exited_in_time(child, status);
    fork_inside_reservation_result = exited && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
  }
  return real_reserve(pointer, bytes, alignment, hint, flags);
}

TEST(ThreadsRuntimeFork, AThreadForkingWhileItHoldsTheRuntimeLockDoesNotDeadlock) {
  const pid_t scenario = fork();
  ASSERT_NE(scenario, -1);
  if (scenario == 0) {
    FakeGpuRuntime fake(&forking_reserve);
    Runtime& runtime = fake.runtime;
    Allocator& gpu = runtime.device("cuda:0");  // the reservation forks under the runtime's mutex
    if (fork_inside_reservation_result.load() != 0) _exit(2);
    gpu.deallocate(gpu.allocate(4 << 20));
    Allocator& cpu = runtime.device("cpu");  // the runtime's mutex was released
    cpu.deallocate(cpu.allocate(4096));
    _exit(0);
  }
  int status = 0;
  const bool exited = fork_test::child_exited_in_time(scenario, status);
  EXPECT_TRUE(exited) << "fork() deadlocked in a thread holding the runtime's mutex";
  if (exited) {
    EXPECT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "check number " << WEXITSTATUS(status) << " failed";
  }
}

}  // namespace
}  // namespace plimsoll
