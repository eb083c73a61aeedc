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

TEST(ThreadsRuntimeFork, ForkWhileAnotherThreadMakesADeviceUnderTheRuntimeLockLeavesAWorkingChild) {
  fake_cuda::Options options;
  options.capacity_bytes = 256 * fake_cuda::kMiB;
  fake_cuda::Driver driver(options);
  cu::Api api = driver.api();
  real_reserve = api.mem_address_reserve;
  api.mem_address_reserve = &parking_reserve;
  Config config;
  config.log_device_creation = false;
  Runtime runtime(config);
  HostInfo host;
  host.total_ram_bytes = 16ull << 30;
  host.available_ram_bytes = 8ull << 30;
  runtime::RuntimeAccess::inject_driver(runtime, api, host);

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

}  // namespace
}  // namespace plimsoll
