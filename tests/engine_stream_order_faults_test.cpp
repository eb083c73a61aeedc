// Stream-ordered reuse's books when host memory runs out (docs/engine.md, "Stream-ordered reuse"): a free on a
// stream parks the block (maps, sets, vectors), an allocation on a stream takes a parked block and splits it, and
// every allocation polls and gives events back to the pool; the last two run inside try_allocate, which is noexcept.
// Now a park that cannot make its records throws std::bad_alloc with the block still live and its free repeatable,
// a split is made without allocating (or declined with nothing changed), and the events' pool has room for every
// event. Failures are injected by replacing operator new in this test program (failing_operator_new.hpp); the tests
// skip under a sanitizer. Over the fake CUDA driver: no GPU needed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "fake_cuda_device.hpp"
#include "failing_operator_new.hpp"
#include "plimsoll/allocator.hpp"

namespace plimsoll {
namespace {

using fake_cuda::fake_cuda_allocator;
using fake_cuda::on;
constexpr std::uint64_t MiB = std::uint64_t{1} << 20;

std::uint64_t tag_in_use(const Stats& stats, const std::string& name) {
  const auto found = std::find_if(stats.tags.begin(), stats.tags.end(), [&](const TagStats& t) { return t.tag == name; });
  return found == stats.tags.end() ? 0 : found->in_use_bytes;
}

// A block of `bytes` parked on stream `a` behind a busy kernel, its batch's event made and recorded by a poll (an
// allocation on stream `b`, which stays live): without that event, a poll under failures would have no event to
// record and would wait for the held stream instead.
struct ParkedBehindAnEvent {
  explicit ParkedBehindAnEvent(std::uint64_t bytes)
      : allocator(fake_cuda_allocator(driver, 64 * MiB)), a(driver.create_stream()), b(driver.create_stream()) {
    parked = allocator->allocate(bytes, on(a));
    a.hold();
    a.launch();
    allocator->deallocate(parked, on(a));
    on_b = allocator->allocate(1 * MiB, on(b));
  }
  fake_cuda::Driver driver;
  std::unique_ptr<Allocator> allocator;
  fake_cuda::Stream& a;
  fake_cuda::Stream& b;
  void* parked = nullptr;
  void* on_b = nullptr;
};

// A fake device and two of its streams, nothing allocated yet: the record_stream tests' start.
struct TwoStreams {
  TwoStreams() : allocator(fake_cuda_allocator(driver, 64 * MiB)), a(driver.create_stream()), side(driver.create_stream()) {}
  fake_cuda::Driver driver;
  std::unique_ptr<Allocator> allocator;
  fake_cuda::Stream& a;
  fake_cuda::Stream& side;
};

// Every allocation a park makes fails in turn (a new stream's queue, its batch, the batch's list, the parked record,
// the size-ordered set): each failure leaves the block live, counted once under its tag, and freeable again.
TEST(EngineStreamOrderFaults, AParkOutOfHostMemoryLeavesTheBlockLiveAndItsFreeRepeatable) {
  SKIP_UNLESS_NEW_CAN_FAIL();
  fake_cuda::Driver driver;
  auto allocator = fake_cuda_allocator(driver, 64 * MiB);
  fake_cuda::Stream& a = driver.create_stream();
  a.hold();
  a.launch();  // events stay pending: parked blocks stay parked
  const Tag tag = intern_tag("stream-order-faults");
  int failures = 0;
  for (int news = 0; news < 64; ++news) {
    void* p = allocator->allocate(4 * MiB, on(a), tag);
    const Stats before = allocator->stats();
    bool bad_alloc = false;
    t_news_before_failure = news;
    try {
      allocator->deallocate(p, on(a));
    } catch (const std::bad_alloc&) {
      bad_alloc = true;
    }
    const bool failure_unused = t_news_before_failure >= 0;
    t_news_before_failure = -1;
    if (!bad_alloc) {
      EXPECT_EQ(allocator->stats().parked_bytes, before.parked_bytes + 4 * MiB);
      if (failure_unused) break;  // the park made fewer allocations than `news`: each was failed once
      continue;
    }
    ++failures;
    const Stats after = allocator->stats();
    EXPECT_EQ(after.live_allocations, before.live_allocations) << "allocation " << news << " of the park failed";
    EXPECT_EQ(after.parked_bytes, before.parked_bytes);
    EXPECT_EQ(tag_in_use(after, "stream-order-faults"), tag_in_use(before, "stream-order-faults"));
    ASSERT_NO_THROW(allocator->deallocate(p, on(a))) << "the block is still live: its free is made again";
    EXPECT_EQ(tag_in_use(allocator->stats(), "stream-order-faults"), tag_in_use(before, "stream-order-faults") - 4 * MiB)
        << "freed under its own tag, once";
  }
  EXPECT_GT(failures, 0) << "no allocation of a park was failed: the test checks nothing";
  a.release();
  allocator->trim();
  const Stats done = allocator->stats();
  EXPECT_EQ(done.parked_bytes, 0U);
  EXPECT_EQ(done.live_allocations, 0U);
  EXPECT_EQ(tag_in_use(done, "stream-order-faults"), 0U);
}

// A parked block larger than the request is split; the rest stays parked. Inside the noexcept try_allocate, with every
// allocation failing: it terminated before (the rest's record and set entry were new nodes).
TEST(EngineStreamOrderFaults, ASplitOfAParkedBlockOutOfHostMemoryDoesNotTerminate) {
  SKIP_UNLESS_NEW_CAN_FAIL();
  ParkedBehindAnEvent device(8 * MiB);
  auto& [driver, allocator, a, b, big, on_b] = device;
  void* part = nullptr;
  {
    const ScopedFailures failing;
    part = allocator->try_allocate(3 * MiB, on(a));
  }
  EXPECT_EQ(part, big) << "the split moves the records to the rest: nothing to allocate";
  EXPECT_EQ(allocator->stats().parked_bytes, 5 * MiB);
  void* rest = allocator->allocate(5 * MiB, on(a));
  EXPECT_EQ(static_cast<char*>(rest), static_cast<char*>(big) + 3 * MiB);
  allocator->deallocate(part, on(a));
  allocator->deallocate(rest, on(a));
  allocator->deallocate(on_b, on(b));
  a.release();
  allocator->trim();
  EXPECT_EQ(allocator->stats().reserved_bytes, 0U);
  EXPECT_EQ(driver.mapped_bytes(), 0U);
}

// Every allocation polls: a batch whose event completed goes back to the heap and its event to the pool. Inside the
// noexcept try_allocate, with every allocation failing: the pool's growth terminated before.
TEST(EngineStreamOrderFaults, GivingAnEventBackToThePoolOutOfHostMemoryDoesNotTerminate) {
  SKIP_UNLESS_NEW_CAN_FAIL();
  ParkedBehindAnEvent device(4 * MiB);
  auto& [driver, allocator, a, b, parked, on_b] = device;
  a.release();
  void* again = nullptr;
  {
    const ScopedFailures failing;
    again = allocator->try_allocate(1 * MiB, on(b));  // polls: the event completed, the batch goes back
  }
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(allocator->stats().parked_bytes, 0U);
  allocator->deallocate(again, on(b));
  allocator->deallocate(on_b, on(b));
  allocator->trim();
  EXPECT_EQ(allocator->stats().live_allocations, 0U);
}

// record_stream out of host memory (PyTorch calls it from code that expects no failure): every allocation it makes
// fails in turn (the record's node, its list). Nothing is thrown; the block is noted in the fixed fallback room, and
// its free waits for the whole device (one cuCtxSynchronize) and frees it at once, its books right. Without the
// fallback the second stream would be lost and the block parked for reuse on `a` alone.
TEST(EngineStreamOrderFaults, ARecordStreamOutOfHostMemoryMakesTheFreeWaitForTheWholeDevice) {
  SKIP_UNLESS_NEW_CAN_FAIL();
  TwoStreams device;
  auto& [driver, allocator, a, side] = device;
  const Tag tag = intern_tag("record-stream-faults");
  int failures = 0;
  for (int news = 0; news < 16; ++news) {
    void* p = allocator->allocate(4 * MiB, on(a), tag);
    t_news_before_failure = news;
    ASSERT_NO_THROW(allocator->record_stream(p, on(side)));
    const bool failed = t_news_before_failure < 0;
    t_news_before_failure = -1;
    const std::uint64_t synchronized = driver.counters().ctx_synchronize;
    allocator->deallocate(p, on(a));
    if (!failed) {  // recorded: parked behind events on both streams, no device synchronization
      EXPECT_EQ(driver.counters().ctx_synchronize, synchronized);
      EXPECT_EQ(allocator->stats().parked_bytes, 4 * MiB);
      allocator->trim();  // the streams are idle: the parked block goes back
      break;
    }
    ++failures;
    EXPECT_EQ(driver.counters().ctx_synchronize, synchronized + 1) << "allocation " << news << " of the record failed";
    const Stats after = allocator->stats();
    EXPECT_EQ(after.unrecorded_streams, static_cast<std::uint64_t>(failures)) << "one noted block per failed record";
    EXPECT_EQ(after.stream_fallbacks, static_cast<std::uint64_t>(failures)) << "its free's device synchronization";
    EXPECT_EQ(after.parked_bytes, 0U) << "freed at once after the device synchronized";
    EXPECT_EQ(after.live_allocations, 0U);
    EXPECT_EQ(tag_in_use(after, "record-stream-faults"), 0U);
  }
  EXPECT_GE(failures, 2) << "the record's node and its list: each failed once";
  EXPECT_EQ(allocator->stats().stream_fallbacks, static_cast<std::uint64_t>(failures)) << "the recorded one: none";
  EXPECT_EQ(allocator->stats().live_allocations, 0U);
}

// A record that fails for a block with a stream recorded already: the fallback covers both, and no record is left
// behind for the next block at that address (which is then parked on its own stream, with no synchronization).
TEST(EngineStreamOrderFaults, AFailedSecondRecordLeavesNoRecordForTheNextBlockThere) {
  SKIP_UNLESS_NEW_CAN_FAIL();
  TwoStreams device;
  auto& [driver, allocator, a, b] = device;
  fake_cuda::Stream& c = driver.create_stream();
  void* p = allocator->allocate(4 * MiB, on(a));
  allocator->record_stream(p, on(b));
  {
    const ScopedFailures failing;
    allocator->record_stream(p, on(c));
  }
  allocator->deallocate(p, on(a));
  EXPECT_EQ(driver.counters().ctx_synchronize, 1U);
  EXPECT_EQ(allocator->stats().parked_bytes, 0U);
  void* next = allocator->allocate(4 * MiB, on(a));
  ASSERT_EQ(next, p) << "freed into the heap at once: the same block again";
  a.hold();
  a.launch();
  allocator->deallocate(next, on(a));
  EXPECT_EQ(driver.counters().ctx_synchronize, 1U) << "a stale record or fallback slot made this free wait too";
  EXPECT_EQ(allocator->stats().parked_bytes, 4 * MiB) << "an ordinary park on its own stream";
  a.release();
  allocator->trim();
  EXPECT_EQ(allocator->stats().parked_bytes, 0U);
}

// Only when the fallback's fixed room is full too does record_stream fail: std::bad_alloc, the block's streams as
// before (its free an ordinary park on its own stream). A free without a stream gives its slot back.
TEST(EngineStreamOrderFaults, ARecordStreamBeyondTheFallbackRoomThrowsWithNothingChanged) {
  SKIP_UNLESS_NEW_CAN_FAIL();
  TwoStreams device;
  auto& [driver, allocator, a, side] = device;
  constexpr std::uint64_t kBlock = MiB / 2;  // 65 of them fit the fake device
  std::vector<void*> noted;
  for (int i = 0; i < 64; ++i) noted.push_back(allocator->allocate(kBlock, on(a)));
  void* extra = allocator->allocate(kBlock, on(a));
  {
    const ScopedFailures failing;
    for (void* p : noted) ASSERT_NO_THROW(allocator->record_stream(p, on(side)));
    EXPECT_THROW(allocator->record_stream(extra, on(side)), std::bad_alloc) << "the 65th: no room left";
  }
  a.hold();
  a.launch();
  allocator->deallocate(extra, on(a));
  EXPECT_EQ(driver.counters().ctx_synchronize, 0U) << "nothing was noted for it";
  EXPECT_EQ(allocator->stats().parked_bytes, kBlock);
  a.release();
  allocator->deallocate(noted.back());  // no stream: its slot is given back
  noted.pop_back();
  extra = allocator->allocate(kBlock, on(a));
  {
    const ScopedFailures failing;
    EXPECT_NO_THROW(allocator->record_stream(extra, on(side))) << "the slot of the block freed without a stream is "
                                                                   "free again";
  }
  for (void* p : noted) allocator->deallocate(p, on(a));
  allocator->deallocate(extra, on(a));
  EXPECT_EQ(driver.counters().ctx_synchronize, 64U) << "one device synchronization per noted block";
  allocator->trim();
  const Stats done = allocator->stats();
  EXPECT_EQ(done.unrecorded_streams, 65U) << "64 noted, then one more in the slot given back; not the 65th refused";
  EXPECT_EQ(done.stream_fallbacks, 64U);
  EXPECT_EQ(done.live_allocations, 0U);
  EXPECT_EQ(done.parked_bytes, 0U);
  EXPECT_EQ(done.reserved_bytes, 0U);
}

}  // namespace
}  // namespace plimsoll
