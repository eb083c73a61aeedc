// plimsoll::Allocator over a simulated device: tags, stats, bad frees, OOM reports, policy changes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "backings/sim_backing.hpp"
#include "plimsoll/allocator.hpp"

namespace plimsoll {
namespace {

using ::testing::HasSubstr;
constexpr std::uint64_t MiB = 1ull << 20;
constexpr std::uint64_t GiB = 1ull << 30;

std::unique_ptr<Allocator> make(std::uint64_t limit, Growth growth = Growth::on_demand, std::uint64_t capacity = 4 * GiB,
                                backings::SimBacking** sim_out = nullptr) {
  DeviceDescription d;
  d.name = "sim:4GiB";
  d.hardware = "simulated device";
  d.policy.growth = growth;
  d.limit_bytes = limit;
  d.total_bytes = capacity;
  auto sim = std::make_unique<backings::SimBacking>(capacity);
  if (sim_out) *sim_out = sim.get();
  return std::make_unique<Allocator>(d, std::move(sim));
}

TEST(EngineAllocator, UsageIsStatsInUseAndReservedAfterEveryOperation) {
  auto a = make(1 * GiB);
  std::vector<void*> live;
  for (int i = 0; i < 200; ++i) {
    if (i % 3 == 2) {
      a->deallocate(live[static_cast<std::size_t>(i) / 2]);
      live[static_cast<std::size_t>(i) / 2] = nullptr;
    } else {
      live.push_back(a->allocate(static_cast<std::size_t>(1000 + 50'000 * (i % 7))));
    }
    const Stats stats = a->stats();
    const MemoryUsage usage = a->usage();
    ASSERT_EQ(usage.in_use_bytes, stats.in_use_bytes) << "after operation " << i;
    ASSERT_EQ(usage.reserved_bytes, stats.reserved_bytes) << "after operation " << i;
  }
  for (void* block : live) a->deallocate(block);
  EXPECT_EQ(a->usage().in_use_bytes, 0u);
}

TEST(EngineAllocator, TagsCountCurrentAndPeakBytes) {
  auto a = make(1 * GiB);
  void* w = a->allocate(10 * MiB, "weights");
  void* x = a->allocate(1000, "activations");
  void* y = a->allocate(3000, "activations");
  a->deallocate(x);
  Stats s = a->stats();
  ASSERT_EQ(s.tags.size(), 2u);
  EXPECT_EQ(s.tags[0].tag, "weights");
  EXPECT_EQ(s.tags[0].in_use_bytes, 10 * MiB);
  EXPECT_EQ(s.tags[1].tag, "activations");
  EXPECT_EQ(s.tags[1].in_use_bytes, 3072u);
  EXPECT_EQ(s.tags[1].peak_in_use_bytes, 1024u + 3072u);
  EXPECT_EQ(s.tags[1].allocations, 1u);
  EXPECT_EQ(s.live_allocations, 2u);
  EXPECT_EQ(s.requested_bytes, 10 * MiB + 3000);
  EXPECT_EQ(s.allocations, 3u);
  EXPECT_EQ(s.frees, 1u);
  a->deallocate(w);
  a->deallocate(y);
  EXPECT_EQ(a->stats().in_use_bytes, 0u);
}

TEST(EngineAllocator, PointersAreAlignedAndOwned) {
  auto a = make(1 * GiB);
  void* p = a->allocate(1);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 256, 0u);
  EXPECT_TRUE(a->owns(p));
  EXPECT_FALSE(a->owns(static_cast<char*>(p) + 256));
  a->deallocate(p);
  EXPECT_FALSE(a->owns(p));
  a->deallocate(nullptr);  // like free(NULL)
}

TEST(EngineAllocator, DoubleFreeNamesTheAddressAndTag) {
  auto a = make(1 * GiB);
  void* p = a->allocate(4096, "batches");
  a->deallocate(p);
  try {
    a->deallocate(p);
    FAIL() << "a double free must throw";
  } catch (const InvalidFree& e) {
    EXPECT_THAT(e.what(), HasSubstr("double free"));
    EXPECT_THAT(e.what(), HasSubstr("batches"));
    EXPECT_THAT(e.what(), HasSubstr("0x"));
  }
  EXPECT_EQ(a->stats().frees, 1u) << "a bad free changes nothing";
}

TEST(EngineAllocator, UnknownFreeIsReportedNotApplied) {
  auto a = make(1 * GiB);
  void* p = a->allocate(4096);
  EXPECT_THROW(a->deallocate(static_cast<char*>(p) + 512), InvalidFree);
  try {
    a->deallocate(reinterpret_cast<void*>(0x1234500));
  } catch (const InvalidFree& e) {
    EXPECT_THAT(e.what(), HasSubstr("not a live allocation"));
  }
  EXPECT_EQ(a->stats().live_allocations, 1u);
  a->deallocate(p);
}

TEST(EngineAllocator, OutOfMemoryThrowsAReportAndCountsIt) {
  auto a = make(64 * MiB);
  void* p = a->allocate(40 * MiB, "weights");
  try {
    a->allocate(40 * MiB, "activations");
    FAIL() << "over the limit must throw";
  } catch (const OutOfMemory& e) {
    EXPECT_EQ(e.details().requested_bytes, 40 * MiB);
    EXPECT_EQ(e.details().limit_bytes, 64 * MiB);
    EXPECT_EQ(e.details().in_use_bytes, 40 * MiB);
    EXPECT_EQ(e.details().tag, "activations");
    EXPECT_EQ(e.details().cause, OomCause::limit_too_low);
    EXPECT_THAT(e.what(), HasSubstr("out of memory"));
    EXPECT_FALSE(e.details().suggestion.empty());
  }
  EXPECT_EQ(a->try_allocate(40 * MiB), nullptr);
  EXPECT_EQ(a->stats().ooms, 2u);
  a->deallocate(p);
}

TEST(EngineAllocator, AnotherProcessHoldingTheDeviceIsNamedAsTheCause) {
  backings::SimBacking* sim = nullptr;
  auto a = make(3 * GiB, Growth::on_demand, 4 * GiB, &sim);
  sim->set_occupied_by_others(3584 * MiB);
  try {
    a->allocate(1 * GiB);
    FAIL();
  } catch (const OutOfMemory& e) {
    EXPECT_EQ(e.details().cause, OomCause::device_taken) << e.what();
  }
}

TEST(EngineAllocator, PreallocateTakesTheBudgetAtCreation) {
  auto a = make(512 * MiB, Growth::preallocate);
  EXPECT_EQ(a->stats().reserved_bytes, 512 * MiB);
  void* p = a->allocate(100 * MiB);
  a->deallocate(p);
  EXPECT_EQ(a->trim(), 0u) << "preallocate keeps its budget";
  EXPECT_EQ(a->stats().reserved_bytes, 512 * MiB);
}

TEST(EngineAllocator, TrimGivesCachedMemoryBack) {
  auto a = make(1 * GiB);
  void* p = a->allocate(100 * MiB);
  a->deallocate(p);
  EXPECT_GT(a->stats().reserved_bytes, 0u);
  EXPECT_GT(a->trim(), 0u);
  EXPECT_EQ(a->stats().reserved_bytes, 0u);
  EXPECT_GE(a->stats().unmaps, 1u);
}

TEST(EngineAllocator, LimitsChangeOnlyBeforeTheFirstAllocation) {
  auto a = make(1 * GiB);
  Policy p;
  p.growth = Growth::preallocate;
  a->set_limits({p, 256 * MiB});
  EXPECT_EQ(a->description().limit_bytes, 256 * MiB);
  EXPECT_EQ(a->stats().reserved_bytes, 256 * MiB);
  void* x = a->allocate(1);
  try {
    a->set_limits({Policy{}, 1 * GiB});
    FAIL();
  } catch (const InvalidState& e) {
    EXPECT_THAT(e.what(), HasSubstr("cannot change the limits of sim:4GiB after its first allocation"));
    EXPECT_THAT(e.what(), HasSubstr("before the device allocates"));
  }
  a->deallocate(x);
}

TEST(EngineAllocator, TakesTheLimitAsGivenWithoutWorkingOutAFraction) {
  auto a = make(1 * GiB);  // a 4 GiB simulated device
  Policy p;
  p.memory_fraction = 0.5;  // what the runtime worked the limit out from; the allocator does not redo it
  a->set_limits({p, 128 * MiB});
  EXPECT_EQ(a->description().limit_bytes, 128 * MiB);
  EXPECT_EQ(a->try_allocate(256 * MiB), nullptr);
}

TEST(EngineAllocator, CreationLineSaysWhatWasCreated) {
  auto a = make(1 * GiB);
  std::string line = a->description().summary();
  EXPECT_THAT(line, HasSubstr("sim:4GiB"));
  EXPECT_THAT(line, HasSubstr("1.00 GiB"));
  EXPECT_THAT(line, HasSubstr("on_demand"));
}

}  // namespace
}  // namespace plimsoll
