// A Runtime's GPU under a share from several threads at once (TSan, label threads): the ledger's responder thread
// trims, samples in-use bytes and pauses the GPU's devices while another thread allocates and frees on one logical
// device and the test creates the other (joining the responder's group meanwhile). Afterwards the ledger holds
// exactly what the driver has mapped.
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "fake_cuda_driver.hpp"
#include "plimsoll/runtime.hpp"
#include "plimsoll/sharing.hpp"
#include "runtime/runtime_access.hpp"
#include "sharing/ledger_file.hpp"
#include "sharing/ledger_snapshot.hpp"

namespace {

using plimsoll::fake_cuda::kMiB;
namespace sharing = plimsoll::sharing;

TEST(RuntimeShareThreads, AllocationsPausesAndANewDeviceRaceWithTheResponder) {
  std::string dir = ::testing::TempDir() + "plimsoll_runshare_threads_XXXXXX";
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  ::setenv("PLIMSOLL_LEDGER_DIR", dir.c_str(), 1);

  plimsoll::fake_cuda::Options options;
  options.capacity_bytes = 256 * kMiB;
  plimsoll::fake_cuda::Driver driver(options);
  plimsoll::Config config;
  config.log_device_creation = false;
  config.gpu_shares = "cuda:0=128MiB:192MiB";
  config.logical_devices["cuda:0"] = {plimsoll::LogicalDeviceConfig::sized(48 * kMiB),
                                      plimsoll::LogicalDeviceConfig::sized(48 * kMiB)};
  auto runtime = std::make_unique<plimsoll::Runtime>(config);
  plimsoll::HostInfo host;
  host.total_ram_bytes = std::uint64_t{16} << 30;
  host.available_ram_bytes = std::uint64_t{8} << 30;
  plimsoll::runtime::RuntimeAccess::inject_driver(*runtime, driver.api(), host);

  plimsoll::Allocator& first = runtime->device("cuda:0/0");
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> served{0};
  std::thread allocating([&] {
    for (std::uint64_t round = 0; !stop.load(); ++round) {
      // Refused at once while paused (null), never blocked.
      if (void* block = first.try_allocate((1 + round % 5) * kMiB)) {
        served.fetch_add(1);
        first.deallocate(block);
      }
      if (round % 64 == 0) first.trim();
    }
  });

  plimsoll::Allocator& second = runtime->device("cuda:0/1");  // joins the responder's group while it runs
  void* held = second.allocate(4 * kMiB);
  const auto patience = std::chrono::seconds(20);
  for (int i = 0; i < 5; ++i) {
    const auto paused = plimsoll::request_pause(::getpid(), true, patience, dir);
    EXPECT_TRUE(paused.at(0).done) << paused.at(0).message;
    const auto resumed = plimsoll::request_resume(::getpid(), patience, dir);
    EXPECT_TRUE(resumed.at(0).done) << resumed.at(0).message;
  }
  while (served.load() < 100) std::this_thread::yield();
  stop.store(true);
  allocating.join();
  second.deallocate(held);

  const auto file = sharing::LedgerFile::open_read_only(sharing::ledger_path(dir, "GPU-fafafafa-fafa-fafa-fafa-fafafafafafa"));
  const sharing::LedgerSnapshot snapshot = sharing::read_snapshot(file);
  ASSERT_EQ(snapshot.processes.size(), 1u);
  EXPECT_EQ(snapshot.processes[0].charged, driver.mapped_bytes()) << "every map charged, every unmap credited";
  EXPECT_FALSE(snapshot.processes[0].paused);

  runtime.reset();
  ::unsetenv("PLIMSOLL_LEDGER_DIR");
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
}

}  // namespace
