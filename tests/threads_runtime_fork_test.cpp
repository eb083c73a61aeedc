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
#include <string>
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

  park_reservation = true;
  // Parked inside the reservation, under the runtime's mutex.
  fork_test::ParkedHolder maker([&] { (void)runtime.device("cuda:0"); });
  while (!reservation_parked.load()) std::this_thread::yield();

  const std::string problem = fork_test::run_in_child([&] {
    Allocator& cpu = runtime.device("cpu");  // the runtime's mutex: hung here before
    void* p = cpu.try_allocate(1 << 20, 1);
    if (p == nullptr) return 2;
    cpu.deallocate(p);
    return cpu.stats().live_allocations == 0 ? 0 : 3;
  });
  release_reservation = true;  // the parent's maker, in case the fork did not wait for it
  maker.wait_until_done();
  EXPECT_EQ(problem, "") << "the runtime's mutex, held by a thread that does not exist in the child";
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
  const std::string problem = fork_test::run_in_child([] {
    Config config;
    config.log_device_creation = false;
    config.logical_devices["cpu"] = {LogicalDeviceConfig::sized(1ull << 30), LogicalDeviceConfig::sized(1ull << 30)};
    Runtime runtime(config);
    Allocator& first = runtime.device("cpu/0");
    Allocator& second = runtime.device("cpu/1");
    void* kept = first.try_allocate(1 << 20, 1);
    if (kept == nullptr) return 10;
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
      const std::string forked = fork_test::run_in_child([&] {  // fork() hung here before
        void* p = second.try_allocate(1 << 20, 1);
        if (p == nullptr) return 2;
        second.deallocate(p);
        first.deallocate(first.allocate(4096));
        return 0;
      });
      if (!forked.empty()) failed = 12;
    }
    stop = true;
    worker.join();
    first.deallocate(kept);
    return failed;
  });
  EXPECT_EQ(problem, "") << "fork() with two logical devices sharing one backing";
}


// A thread that forks while it holds the runtime's mutex (a driver library's fork+exec inside Runtime::device's
// driver load, GPU scan or backing construction): the preparation took the outer lock again, and the thread
// deadlocked on itself in fork(). The fake driver's address reservation (called under the runtime's mutex) forks; the
// grandchild exits at once, as an exec would; the scenario runs in a child, so the hang is caught by the deadline.
std::atomic<int> fork_inside_reservation_result{-1};

cu::Result forking_reserve(cu::DevicePtr* pointer, std::size_t bytes, std::size_t alignment, cu::DevicePtr hint,
                           unsigned long long flags) {
  if (fork_inside_reservation_result.load() == -1) {
    // fork() hung here before: the runtime's mutex, taken again by its own holder.
    fork_inside_reservation_result = fork_test::run_in_child([] { return 0; }).empty() ? 0 : 1;
  }
  return real_reserve(pointer, bytes, alignment, hint, flags);
}

TEST(ThreadsRuntimeFork, AThreadForkingWhileItHoldsTheRuntimeLockDoesNotDeadlock) {
  const std::string problem = fork_test::run_in_child([] {
    FakeGpuRuntime fake(&forking_reserve);
    Runtime& runtime = fake.runtime;
    Allocator& gpu = runtime.device("cuda:0");  // the reservation forks under the runtime's mutex
    if (fork_inside_reservation_result.load() != 0) return 2;
    gpu.deallocate(gpu.allocate(4 << 20));
    Allocator& cpu = runtime.device("cpu");  // the runtime's mutex was released
    cpu.deallocate(cpu.allocate(4096));
    return 0;
  });
  EXPECT_EQ(problem, "") << "fork() in a thread holding the runtime's mutex";
}

}  // namespace
}  // namespace plimsoll
