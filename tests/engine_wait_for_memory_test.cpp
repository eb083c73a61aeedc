// A backing that can wait for memory (a shared GPU whose borrowers were asked to give memory back,
// backings::Backing::wait_for_memory) makes the allocator try a failed allocation once more after the wait. Only the
// last attempt may report: a request that finally fails is counted (Stats::ooms) and recorded (an OOM event) exactly
// once, one that succeeds on the retry never; on host devices and on stream-ordered ones, where the first attempt may
// also wait for parked blocks with the device lock released between polls.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <unistd.h>

#include "backings/backing_adaptor.hpp"
#include "backings/cuda_vmm_backing.hpp"
#include "backings/sim_backing.hpp"
#include "fake_cuda_device.hpp"
#include "plimsoll/allocator.hpp"
#include "plimsoll/error.hpp"
#include "plimsoll/recording.hpp"
#include "plimsoll/trace.hpp"

namespace plimsoll {
namespace {

using fake_cuda::on;
constexpr std::uint64_t MiB = std::uint64_t{1} << 20;

// Over any backing: says it can wait for memory, and each wait runs the test's `on_wait` (without the allocator's
// lock, as the engine promises), which may free memory as a borrower giving its loan back would.
class WaitingBacking final : public backings::OwningBackingAdaptor {
 public:
  WaitingBacking(std::unique_ptr<backings::Backing> upstream, std::function<void()>& on_wait)
      : OwningBackingAdaptor("waiting", std::move(upstream)), on_wait_(on_wait) {}
  int waits() const noexcept { return waits_.load(); }

 private:
  bool do_can_wait_for_memory() const noexcept override { return true; }
  void do_wait_for_memory() noexcept override {
    waits_.fetch_add(1);
    if (on_wait_) on_wait_();
  }

  std::function<void()>& on_wait_;
  std::atomic<int> waits_{0};
};

class WaitForMemory : public ::testing::Test {
 protected:
  ~WaitForMemory() override {
    on_wait_ = nullptr;
    device_.reset();
    std::filesystem::remove(path_);
  }

  void make_device(std::unique_ptr<backings::Backing> upstream, std::uint64_t limit, bool stream_ordered) {
    auto backing = std::make_unique<WaitingBacking>(std::move(upstream), on_wait_);
    backing_ = backing.get();
    DeviceDescription description;
    description.name = stream_ordered ? "cuda:0" : "sim";
    description.hardware = "test";
    description.limit_bytes = limit;
    description.total_bytes = 64 * MiB;
    device_ = std::make_unique<Allocator>(description, std::move(backing));
    recording_ = Recording::open(path_);
    device_->record_to(recording_);
  }
  void make_host_device(std::uint64_t limit) {
    make_device(std::make_unique<backings::SimBacking>(64 * MiB), limit, false);
  }
  void make_cuda_device(std::uint64_t limit) {
    make_device(std::make_unique<backings::CudaVmmBacking>(driver_.api(), 0), limit, true);
  }

  // The OOM events in the recording so far (closes it).
  std::size_t recorded_ooms() {
    device_->record_to(nullptr);
    recording_->close();
    std::size_t ooms = 0;
    for (const TraceEvent& event : read_trace(path_).events) ooms += event.kind == TraceEvent::Kind::oom ? 1 : 0;
    return ooms;
  }

  std::string path_ = (std::filesystem::temp_directory_path() /
                       ("plimsoll-wait-for-memory-" + std::to_string(::getpid()) + "-" +
                        ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".plimsoll"))
                          .string();
  fake_cuda::Driver driver_;
  std::function<void()> on_wait_;
  WaitingBacking* backing_ = nullptr;
  std::shared_ptr<Recording> recording_;
  std::unique_ptr<Allocator> device_;
};

TEST_F(WaitForMemory, HostRequestThatSucceedsOnTheRetryIsNoOutOfMemory) {
  make_host_device(8 * MiB);
  void* held = device_->allocate(6 * MiB);
  on_wait_ = [&] { device_->deallocate(held); };  // the loan comes back while the allocation waits
  void* waited = device_->allocate(4 * MiB);
  EXPECT_NE(waited, nullptr);
  EXPECT_EQ(backing_->waits(), 1);
  EXPECT_EQ(device_->stats().ooms, 0u) << "the first, retried attempt's failure was counted";
  device_->deallocate(waited);
  EXPECT_EQ(recorded_ooms(), 0u) << "the first, retried attempt's failure was recorded";
}

TEST_F(WaitForMemory, HostRequestThatFailsAfterTheWaitIsReportedOnce) {
  make_host_device(8 * MiB);
  void* held = device_->allocate(6 * MiB);
  EXPECT_THROW(device_->allocate(4 * MiB), OutOfMemory);
  EXPECT_EQ(backing_->waits(), 1);
  EXPECT_EQ(device_->stats().ooms, 1u);
  EXPECT_EQ(device_->try_allocate(4 * MiB), nullptr);
  EXPECT_EQ(backing_->waits(), 2);
  EXPECT_EQ(device_->stats().ooms, 2u);
  device_->deallocate(held);
  EXPECT_EQ(recorded_ooms(), 2u);
}

TEST_F(WaitForMemory, StreamOrderedRequestThatSucceedsOnTheRetryIsNoOutOfMemory) {
  make_cuda_device(8 * MiB);
  fake_cuda::Stream& a = driver_.create_stream();
  void* held = device_->allocate(6 * MiB, on(a));
  on_wait_ = [&] { device_->deallocate(held, on(a)); };
  void* waited = device_->allocate(4 * MiB, on(a));
  EXPECT_NE(waited, nullptr);
  EXPECT_EQ(backing_->waits(), 1);
  EXPECT_EQ(device_->stats().ooms, 0u) << "the first, retried attempt's failure was counted";
  device_->deallocate(waited, on(a));
  EXPECT_EQ(recorded_ooms(), 0u) << "the first, retried attempt's failure was recorded";
}

TEST_F(WaitForMemory, StreamOrderedRequestThatFailsAfterTheWaitIsReportedOnce) {
  make_cuda_device(8 * MiB);
  fake_cuda::Stream& a = driver_.create_stream();
  void* held = device_->allocate(6 * MiB, on(a));
  EXPECT_THROW(device_->allocate(4 * MiB, on(a)), OutOfMemory);
  EXPECT_EQ(backing_->waits(), 1);
  EXPECT_EQ(device_->stats().ooms, 1u);
  EXPECT_EQ(device_->try_allocate(4 * MiB, on(a)), nullptr);
  EXPECT_EQ(backing_->waits(), 2);
  EXPECT_EQ(device_->stats().ooms, 2u);
  device_->deallocate(held, on(a));
  EXPECT_EQ(recorded_ooms(), 2u);
}

// The first attempt waits for parked blocks with the device lock released between polls; another thread's allocation
// meanwhile must not change whether that attempt reports (a device-wide "this attempt is quiet" flag did: the other
// call cleared it, and the request that finally failed was counted twice).
TEST_F(WaitForMemory, AnotherThreadsAllocationDuringTheFirstAttemptDoesNotMakeItReport) {
  make_cuda_device(8 * MiB);
  fake_cuda::Stream& a = driver_.create_stream();
  fake_cuda::Stream& b = driver_.create_stream();
  void* parked = device_->allocate(6 * MiB, on(a));
  a.hold();
  a.launch();  // a kernel on `a` still uses the block
  device_->deallocate(parked, on(a));
  const std::uint64_t queries_before = driver_.counters().event_query;

  std::atomic<bool> finished{false};
  void* refused = reinterpret_cast<void*>(1);
  std::thread asker([&] {
    refused = device_->try_allocate(10 * MiB, on(b));  // over the limit: fails whatever comes back
    finished.store(true);
  });
  while (driver_.counters().event_query < queries_before + 4 && !finished.load()) std::this_thread::yield();
  ASSERT_FALSE(finished.load()) << "the first attempt did not wait for the parked block";
  void* meanwhile = device_->allocate(1 * MiB, on(b));  // succeeds while the other request polls
  a.release();
  asker.join();
  EXPECT_EQ(refused, nullptr);
  EXPECT_EQ(backing_->waits(), 1);
  EXPECT_EQ(device_->stats().ooms, 1u) << "the request that finally failed was not counted exactly once";
  device_->deallocate(meanwhile, on(b));
  EXPECT_EQ(recorded_ooms(), 1u) << "the request that finally failed was not recorded exactly once";
}

}  // namespace
}  // namespace plimsoll
