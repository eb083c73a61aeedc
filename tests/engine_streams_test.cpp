// Stream-ordered reuse in the engine (src/engine/stream_order.hpp) on the fake CUDA driver: a block freed on a
// busy stream is reused at once by that stream, by others only once the stream's event completed; record_stream
// adds streams to wait for; unmapping never waits for the whole device after stream frees; the out-of-memory path
// waits for parked blocks; no event falls back to a device synchronization; host devices ignore streams.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "backings/host_backing.hpp"
#include "fake_cuda_device.hpp"
#include "plimsoll/error.hpp"

namespace plimsoll {
namespace {

using ::testing::HasSubstr;
using fake_cuda::fake_cuda_allocator;
using fake_cuda::on;
constexpr std::size_t MiB = std::size_t{1} << 20;

TEST(EngineStreams, SameStreamReusesAFreedBlockAtOnceOthersWaitForItsEvent) {
  fake_cuda::Driver driver;
  auto allocator = fake_cuda_allocator(driver, 32 * MiB);
  fake_cuda::Stream& a = driver.create_stream();
  fake_cuda::Stream& b = driver.create_stream();

  void* first = allocator->allocate(4 * MiB, on(a));
  a.hold();
  a.launch();  // a kernel on `a` still uses `first`
  allocator->deallocate(first, on(a));
  EXPECT_FALSE(allocator->owns(first));
  Stats stats = allocator->stats();
  EXPECT_EQ(stats.parked_bytes, 4 * MiB);
  EXPECT_EQ(stats.in_use_bytes, 0u);
  EXPECT_EQ(stats.live_allocations, 0u);
  EXPECT_EQ(stats.frees, 1u);

  void* on_b = allocator->allocate(4 * MiB, on(b));
  EXPECT_NE(on_b, first) << "another stream got the block while the freeing stream's work was pending";
  void* on_a = allocator->allocate(4 * MiB, on(a));
  EXPECT_EQ(on_a, first) << "the freeing stream reuses its block at once, as stream order allows";
  EXPECT_EQ(driver.counters().ctx_synchronize, 0u);

  allocator->deallocate(on_a, on(a));
  void* still_not = allocator->allocate(4 * MiB, on(b));
  EXPECT_NE(still_not, first);
  a.release();
  void* now = allocator->allocate(4 * MiB, on(b));
  EXPECT_EQ(now, first) << "after the event completed the block is back in the heap for every stream";
  stats = allocator->stats();
  EXPECT_EQ(stats.parked_bytes, 0u);
  EXPECT_EQ(stats.allocations, 5u);
  EXPECT_EQ(stats.frees, 2u);
  EXPECT_EQ(stats.live_allocations, 3u);
  EXPECT_EQ(stats.in_use_bytes, 12 * MiB);
  EXPECT_EQ(driver.counters().ctx_synchronize, 0u);
  for (void* ptr : {on_b, still_not, now}) allocator->deallocate(ptr, on(b));
}

TEST(EngineStreams, TrimAfterTheLastParkedBlockWasReusedReturns) {
  // The batch that parked the block outlives it (the block was reused on its own stream): trim, the destructor and
  // PyTorch's empty_cache wait for such batches, which must end when their event does, not hang.
  fake_cuda::Driver driver;
  auto allocator = fake_cuda_allocator(driver, 32 * MiB);
  fake_cuda::Stream& a = driver.create_stream();
  void* first = allocator->allocate(4 * MiB, on(a));
  allocator->deallocate(first, on(a));
  void* again = allocator->allocate(4 * MiB, on(a));
  EXPECT_EQ(again, first);
  allocator->trim();
  EXPECT_EQ(allocator->stats().parked_bytes, 0u);
  allocator->deallocate(again, on(a));
}

TEST(EngineStreams, FreesOfOneStreamShareOneEventAndEventsArePooled) {
  fake_cuda::Driver driver;
  auto allocator = fake_cuda_allocator(driver, 32 * MiB);
  fake_cuda::Stream& a = driver.create_stream();
  for (int round = 0; round < 100; ++round) {
    void* ptrs[8];
    for (void*& ptr : ptrs) ptr = allocator->allocate(64 * 1024, on(a));
    for (void* ptr : ptrs) allocator->deallocate(ptr, on(a));
  }
  const fake_cuda::Counters counters = driver.counters();
  EXPECT_LE(counters.event_record, 100u) << "one event per poll after frees, not one per free";
  EXPECT_LE(counters.event_create, 2u);
  EXPECT_EQ(allocator->stats().in_use_bytes, 0u);
}

TEST(EngineStreams, ALargerParkedBlockIsSplitAndItsRestStaysParked) {
  fake_cuda::Driver driver;
  auto allocator = fake_cuda_allocator(driver, 32 * MiB);
  fake_cuda::Stream& a = driver.create_stream();
  void* big = allocator->allocate(8 * MiB, on(a));
  a.hold();
  a.launch();
  allocator->deallocate(big, on(a));
  void* part = allocator->allocate(3 * MiB, on(a));
  EXPECT_EQ(part, big);
  EXPECT_EQ(allocator->stats().parked_bytes, 5 * MiB);
  void* rest = allocator->allocate(5 * MiB, on(a));
  EXPECT_EQ(reinterpret_cast<char*>(rest), static_cast<char*>(big) + 3 * MiB);
  EXPECT_EQ(allocator->stats().parked_bytes, 0u);
  allocator->deallocate(part, on(a));
  allocator->deallocate(rest, on(a));
  a.release();
  allocator->trim();
  EXPECT_EQ(allocator->stats().reserved_bytes, 0u) << "the split parts coalesced and went back";
  EXPECT_EQ(driver.mapped_bytes(), 0u);
}

TEST(EngineStreams, RecordStreamMakesEveryoneWaitForTheOtherStream) {
  fake_cuda::Driver driver;
  auto allocator = fake_cuda_allocator(driver, 32 * MiB);
  fake_cuda::Stream& a = driver.create_stream();
  fake_cuda::Stream& side = driver.create_stream();
  void* ptr = allocator->allocate(4 * MiB, on(a));
  allocator->record_stream(ptr, on(side));
  side.hold();
  side.launch();  // the side stream still uses the block
  allocator->deallocate(ptr, on(a));
  void* again = allocator->allocate(4 * MiB, on(a));
  EXPECT_NE(again, ptr) << "reused on its own stream while the recorded side stream still used it";
  side.release();
  void* after = allocator->allocate(4 * MiB, on(side));
  EXPECT_EQ(after, ptr);
  EXPECT_THROW(allocator->record_stream(static_cast<char*>(ptr) + 256, on(side)), InvalidArgument);
  allocator->deallocate(again, on(a));
  allocator->deallocate(after, on(side));
}

TEST(EngineStreams, UnmappingAfterStreamFreesNeverSynchronizesTheDevice) {
  fake_cuda::Driver driver;
  auto allocator = fake_cuda_allocator(driver, 32 * MiB);
  fake_cuda::Stream& a = driver.create_stream();
  void* ptr = allocator->allocate(6 * MiB, on(a));
  a.launch();
  allocator->deallocate(ptr, on(a));
  EXPECT_GT(allocator->trim(), 0u);
  EXPECT_EQ(driver.counters().ctx_synchronize, 0u) << "blocks reach the heap only once their events completed";
  EXPECT_EQ(driver.mapped_bytes(), 0u);

  void* unordered = allocator->allocate(6 * MiB);  // no stream: nothing says which streams used it
  allocator->deallocate(unordered);
  EXPECT_GT(allocator->trim(), 0u);
  EXPECT_EQ(driver.counters().ctx_synchronize, 1u) << "a free without its stream leaves only the device to wait for";
}

TEST(EngineStreams, OutOfMemoryWaitsForParkedBlocksBeforeGivingUp) {
  fake_cuda::Driver driver;
  auto allocator = fake_cuda_allocator(driver, 8 * MiB);
  fake_cuda::Stream& a = driver.create_stream();
  fake_cuda::Stream& b = driver.create_stream();
  void* ptr = allocator->allocate(6 * MiB, on(a));
  a.hold();
  a.launch();
  allocator->deallocate(ptr, on(a));
  std::thread completes([&] {
    while (driver.counters().event_query < 4) std::this_thread::yield();  // the allocation below is polling
    a.release();
  });
  void* waited = allocator->allocate(6 * MiB, on(b));
  completes.join();
  EXPECT_EQ(waited, ptr);
  EXPECT_EQ(allocator->stats().ooms, 0u) << "a wait that succeeds is no out-of-memory";
  try {
    allocator->allocate(6 * MiB, on(b));
    FAIL() << "nothing parked to wait for: must report";
  } catch (const OutOfMemory& error) {
    EXPECT_THAT(error.what(), HasSubstr("cuda:0"));
  }
  EXPECT_EQ(allocator->try_allocate(6 * MiB, on(b)), nullptr);
  EXPECT_EQ(allocator->stats().ooms, 2u);
  allocator->deallocate(waited, on(b));
}

TEST(EngineStreams, DoubleFreesOfParkedBlocksAreRefused) {
  fake_cuda::Driver driver;
  auto allocator = fake_cuda_allocator(driver, 32 * MiB);
  fake_cuda::Stream& a = driver.create_stream();
  void* ptr = allocator->allocate(MiB, on(a));
  a.hold();
  a.launch();
  allocator->deallocate(ptr, on(a));
  try {
    allocator->deallocate(ptr, on(a));
    FAIL() << "double free accepted";
  } catch (const InvalidFree& error) {
    EXPECT_THAT(error.what(), HasSubstr("freed already"));
  }
  EXPECT_THROW(allocator->deallocate(ptr), InvalidFree);
  EXPECT_EQ(allocator->stats().parked_bytes, Stats{}.parked_bytes + MiB);
  a.release();
}

TEST(EngineStreams, NoEventFallsBackToSynchronizingTheDevice) {
  fake_cuda::Driver driver;
  auto allocator = fake_cuda_allocator(driver, 32 * MiB);
  fake_cuda::Stream& a = driver.create_stream();
  void* ptr = allocator->allocate(4 * MiB, on(a));
  a.launch();
  allocator->deallocate(ptr, on(a));
  driver.fail(fake_cuda::Call::event_record, 1, cuda_driver::kErrorInvalidValue);
  void* next = allocator->allocate(4 * MiB, on(a));  // the poll cannot record: synchronizes, frees the batch
  EXPECT_EQ(driver.counters().ctx_synchronize, 1u);
  EXPECT_EQ(allocator->stats().parked_bytes, 0u);
  EXPECT_EQ(next, ptr);
  allocator->deallocate(next, on(a));
}

// A block with a record_stream'd second stream whose event cannot be recorded is freed into the heap at once
// (after a device synchronization): the free's relabel must have happened before, on the live block.
TEST(EngineStreams, NoEventForARecordedStreamFreesTheBlockAtOnceWithItsBooksRight) {
  fake_cuda::Driver driver;
  auto allocator = fake_cuda_allocator(driver, 32 * MiB);
  fake_cuda::Stream& a = driver.create_stream();
  fake_cuda::Stream& b = driver.create_stream();
  void* ptr = allocator->allocate(4 * MiB, on(a), intern_tag("cross-fallback"));
  allocator->record_stream(ptr, on(b));
  driver.fail(fake_cuda::Call::event_record, 1, cuda_driver::kErrorInvalidValue);
  allocator->deallocate(ptr, on(a));
  EXPECT_EQ(driver.counters().ctx_synchronize, 1u);
  const Stats stats = allocator->stats();
  EXPECT_EQ(stats.live_allocations, 0u);
  EXPECT_EQ(stats.in_use_bytes, 0u);
  EXPECT_EQ(stats.requested_bytes, 0u);
  EXPECT_EQ(stats.parked_bytes, 0u);
  void* next = allocator->allocate(4 * MiB, on(a));
  EXPECT_EQ(next, ptr);
  allocator->deallocate(next, on(a));
  allocator->trim();
  EXPECT_EQ(allocator->stats().requested_bytes, 0u);
}

TEST(EngineStreams, RecordedTraceSeesFreesAndReusesAsTheProgramDid) {
  fake_cuda::Driver driver;
  auto allocator = fake_cuda_allocator(driver, 32 * MiB);
  fake_cuda::Stream& a = driver.create_stream();
  void* ptr = allocator->allocate(MiB, on(a), intern_tag("activations"));
  std::memset(ptr, 7, MiB);  // the fake maps real memory
  a.hold();
  a.launch();
  allocator->deallocate(ptr, on(a));
  void* again = allocator->allocate(512 * 1024, on(a), intern_tag("activations"));
  EXPECT_EQ(again, ptr);
  const Stats stats = allocator->stats();
  ASSERT_FALSE(stats.tags.empty());
  EXPECT_EQ(stats.tags[0].tag, "activations");
  EXPECT_EQ(stats.tags[0].in_use_bytes, 512 * 1024u);
  EXPECT_EQ(stats.requested_bytes, 512 * 1024u);
  EXPECT_THAT(allocator->snapshot(), HasSubstr("\"parked\""));
  allocator->reset_peaks();
  EXPECT_EQ(allocator->stats().peak_in_use_bytes, 512 * 1024u);
  a.release();
  allocator->deallocate(again, on(a));
}

TEST(EngineStreams, HostDevicesIgnoreStreams) {
  DeviceDescription description;
  description.name = "cpu";
  description.hardware = "host";
  description.limit_bytes = 64 * MiB;
  Allocator allocator(description, std::make_unique<backings::HostBacking>());
  int stream_object = 0;
  const Stream stream{&stream_object};
  void* ptr = allocator.allocate(MiB, stream);
  allocator.record_stream(ptr, stream);
  allocator.deallocate(ptr, stream);
  EXPECT_FALSE(allocator.owns(ptr));
  EXPECT_EQ(allocator.stats().parked_bytes, 0u);
  EXPECT_EQ(allocator.allocate(MiB, stream), ptr) << "program order: reused at once";
  allocator.deallocate(ptr);
}

}  // namespace
}  // namespace plimsoll
