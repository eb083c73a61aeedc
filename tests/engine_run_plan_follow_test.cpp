// Run plans followed (src/engine/run_plan_follower.hpp): on a bare heap, each request at its planned offset and each
// way a plan ends; through Allocator, every request routed to it while active (small ones too, past the per-thread
// caches), the step plans held off and taking over at the plan's end or after an early end, stats, and the refusals.
#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backings/sim_backing.hpp"
#include "engine/heap.hpp"
#include "engine/run_plan.hpp"
#include "engine/run_plan_follower.hpp"
#include "plimsoll/allocator.hpp"
#include "plimsoll/error.hpp"
#include "plimsoll/runtime.hpp"
#include "sim_device.hpp"

namespace plimsoll::engine {
namespace {

using ::testing::HasSubstr;
using End = RunPlanStats::End;

constexpr std::uint64_t KiB = 1ull << 10;
constexpr std::uint64_t MiB = 1ull << 20;
constexpr std::uint64_t kGranule = 2 * MiB;

// A plan of (size, offset) entries, its fingerprint the sizes of the first `fingerprinted` (all by default).
RunPlan make_plan(const std::vector<std::pair<std::uint64_t, std::uint64_t>>& entries, std::uint64_t limit,
                  std::size_t fingerprinted = RunPlan::kFingerprint) {
  RunPlan plan;
  plan.granule = kGranule;
  plan.limit = limit;
  plan.source = "test.plan";
  for (const auto& [size, offset] : entries) {
    plan.entries.push_back({Heap::round(size), offset});
    if (plan.fingerprint.size() < fingerprinted) plan.fingerprint.push_back(Heap::round(size));
  }
  plan.covered_granules = count_covered_granules(plan.entries, kGranule);
  return plan;
}

HeapOptions with_limit(std::uint64_t limit) {
  HeapOptions options;
  options.limit = limit;
  return options;
}

struct BareHeap {
  explicit BareHeap(std::uint64_t limit) : sim(4ull << 30), heap(sim, with_limit(limit)) {}
  backings::SimBacking sim;
  Heap heap;
};

// ---- On a bare heap

TEST(EngineRunPlanFollow, PlacesEachRequestAtItsOffsetAndMapsOnlyItsGranules) {
  BareHeap h(64 * MiB);
  // Out of address order, a small one inside a large block's granule, one spanning two granules.
  RunPlanFollower follower(h.heap, make_plan({{3 * MiB, 8 * MiB}, {4 * KiB, 0}, {100, 4 * KiB}, {1 * MiB, 1 * MiB}},
                                             64 * MiB));
  const std::vector<std::uint64_t> offsets = {8 * MiB, 0, 4 * KiB, 1 * MiB};
  const std::vector<std::uint64_t> sizes = {3 * MiB, 4 * KiB, 100, 1 * MiB};
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    bool ended = true;
    EXPECT_EQ(follower.allocate(sizes[i], 0, &ended), h.heap.base() + offsets[i]) << "request " << i;
    EXPECT_FALSE(ended);
  }
  // Granules 0 (three small blocks and the 1 MiB one) and 4-5 (the 3 MiB block at 8 MiB): exactly those, nothing
  // ahead (best fit's growth would map 10 % more).
  EXPECT_EQ(h.heap.mapped_bytes(), 3 * kGranule);
  EXPECT_TRUE(h.heap.granules().is_mapped(0));
  EXPECT_FALSE(h.heap.granules().is_mapped(1));
  EXPECT_TRUE(h.heap.granules().is_mapped(4) && h.heap.granules().is_mapped(5));
  EXPECT_EQ(h.heap.free_bytes_small(), 0u) << "no small page: the plan places small requests in large blocks";
  EXPECT_EQ(follower.stats().placed, 4u);
  EXPECT_TRUE(follower.active());
  EXPECT_EQ(h.heap.self_check(), "");
  // At the boundary closing its last step, the plan is finished.
  EXPECT_TRUE(follower.at_boundary());
  EXPECT_EQ(follower.stats().ended_by, End::finished);
  EXPECT_EQ(follower.stats().ended_at, 4u);
}

TEST(EngineRunPlanFollow, EachMismatchEndsThePlanWithItsReason) {
  struct Case {
    const char* name;
    End expected;
  };
  for (const Case& c : {Case{"size", End::size}, Case{"fingerprint", End::fingerprint},
                        Case{"occupied", End::occupied}, Case{"limit", End::limit},
                        Case{"finished", End::finished}}) {
    SCOPED_TRACE(c.name);
    BareHeap h(8 * MiB);
    const std::string name = c.name;
    // Two entries placed as planned, then the third request meets the case's mismatch.
    std::vector<std::pair<std::uint64_t, std::uint64_t>> entries = {{1 * MiB, 0}, {1 * MiB, 1 * MiB}};
    std::uint64_t third = 1 * MiB;
    if (name == "size" || name == "fingerprint") entries.push_back({1 * MiB, 2 * MiB}), third = 2 * MiB;
    if (name == "occupied") entries.push_back({1 * MiB, 512 * KiB});  // over the first entry, still live
    if (name == "limit") entries.push_back({1 * MiB, 7 * MiB + 512 * KiB});  // granules 3 and 4: 5 of 8 MiB's 4
    const std::size_t fingerprinted = name == "size" ? 2 : RunPlan::kFingerprint;
    RunPlanFollower follower(h.heap, make_plan(entries, 8 * MiB, fingerprinted));
    bool ended = true;
    ASSERT_NE(follower.allocate(1 * MiB, 0, &ended), 0u);
    ASSERT_NE(follower.allocate(1 * MiB, 0, &ended), 0u);
    EXPECT_FALSE(ended);
    if (name == "limit") {
      ASSERT_NE(h.heap.allocate_at(h.heap.base() + 2 * MiB, 4 * MiB, 0), 0u);  // granules 1-2
    }
    EXPECT_EQ(follower.allocate(third, 0, &ended), 0u);
    EXPECT_TRUE(ended);
    EXPECT_EQ(follower.stats().ended_by, c.expected);
    EXPECT_EQ(follower.stats().ended_at, 2u);
    EXPECT_EQ(follower.stats().placed, 2u);
    EXPECT_FALSE(follower.active());
    EXPECT_EQ(h.heap.self_check(), "");
    EXPECT_EQ(h.heap.mapped_bytes(), name == "limit" ? 3 * kGranule : kGranule) << "the mismatch mapped nothing";
  }
}

TEST(EngineRunPlanFollow, OverTheLimitCachedGranulesAreGivenBackToPlaceTheRequest) {
  BareHeap h(4 * MiB);  // two granules
  RunPlanFollower follower(h.heap, make_plan({{2 * MiB, 0}, {2 * MiB, 2 * MiB}, {2 * MiB, 4 * MiB}}, 4 * MiB));
  bool ended = true;
  const std::uint64_t first = follower.allocate(2 * MiB, 0, &ended);
  ASSERT_NE(follower.allocate(2 * MiB, 0, &ended), 0u);
  Heap::Freed freed;
  ASSERT_TRUE(h.heap.deallocate(first, freed));  // granule 0 stays mapped, cached
  // Granule 2 is one over the limit: granule 0 is given back for it, and the plan goes on.
  EXPECT_EQ(follower.allocate(2 * MiB, 0, &ended), h.heap.base() + 4 * MiB);
  EXPECT_FALSE(ended);
  EXPECT_EQ(follower.stats().placed, 3u);
  EXPECT_EQ(follower.stats().made_room, 1u);
  EXPECT_EQ(h.heap.counters().unmaps, 1u);
  EXPECT_FALSE(h.heap.granules().is_mapped(0));
  EXPECT_EQ(h.heap.mapped_bytes(), 4 * MiB);
  EXPECT_EQ(h.heap.self_check(), "");
}

TEST(EngineRunPlanFollow, APlanOfAnotherGranuleOrLimitIsRefusedNamingWhy) {
  BareHeap h(64 * MiB);
  RunPlan plan = make_plan({{1 * MiB, 0}}, 64 * MiB);
  EXPECT_EQ(run_plan_mismatch(plan, h.heap, "sim:4GiB"), "");
  plan.limit = 0;  // packed under no limit: followed under any
  EXPECT_EQ(run_plan_mismatch(plan, h.heap, "sim:4GiB"), "");
  plan.limit = 32 * MiB;  // packed for a lower limit: followed (the heap enforces its own)
  EXPECT_EQ(run_plan_mismatch(plan, h.heap, "sim:4GiB"), "");
  plan.limit = 66 * MiB;  // a higher one counts on room the device does not have
  EXPECT_THAT(run_plan_mismatch(plan, h.heap, "sim:4GiB"),
              AllOf(HasSubstr("test.plan"), HasSubstr("limit of 69206016 bytes"), HasSubstr("67108864"),
                    HasSubstr("pack it again")));
  plan.limit = 64 * MiB;
  plan.granule = 64 * KiB;
  EXPECT_THAT(run_plan_mismatch(plan, h.heap, "sim:4GiB"), AllOf(HasSubstr("granules"), HasSubstr("pack it again")));
  plan.granule = kGranule;
  plan.entries.clear();
  EXPECT_THAT(run_plan_mismatch(plan, h.heap, "sim:4GiB"), HasSubstr("no requests"));
}

// ---- Through Allocator

using testing_support::sim_device;

std::unique_ptr<Allocator> sim_allocator(std::uint64_t limit) {
  return std::make_unique<Allocator>(sim_device(limit), std::make_unique<backings::SimBacking>(4ull << 30));
}

TEST(EngineRunPlanFollow, EveryRequestGoesThroughThePlanPastTheThreadCachesAndEndsForGood) {
  auto device = sim_allocator(64 * MiB);
  device->set_thread_cache(8 * MiB);  // the front would serve these small requests from thread caches
  // Small requests planned inside the first granule, apart from each other, then one that differs in size.
  ASSERT_EQ(RunPlanLoader::install(*device, make_plan({{4 * KiB, 0}, {4 * KiB, 64 * KiB}, {256, 128 * KiB},
                                                       {4 * KiB, 192 * KiB}, {4 * KiB, 256 * KiB}},
                                                      64 * MiB)),
            "");
  const auto base = reinterpret_cast<std::uint64_t>(device->allocate(4 * KiB));
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(device->allocate(4 * KiB)), base + 64 * KiB);
  void* small = device->allocate(256);
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(small), base + 128 * KiB);
  device->deallocate(small);  // frees need no plan
  EXPECT_TRUE(device->stats().run_plan.active());
  const std::string snapshot_before_end = device->snapshot();
  // 8 KiB where the plan says 4 KiB: the plan ends, this request and the rest take best fit.
  void* other = device->allocate(8 * KiB);
  EXPECT_NE(reinterpret_cast<std::uint64_t>(other), base + 192 * KiB);
  // A request matching the next entry is not placed by it: the plan ended for good.
  void* next = device->allocate(4 * KiB);
  EXPECT_NE(reinterpret_cast<std::uint64_t>(next), base + 192 * KiB);
  const Stats stats = device->stats();
  EXPECT_TRUE(stats.run_plan.loaded);
  EXPECT_FALSE(stats.run_plan.active());
  EXPECT_EQ(stats.run_plan.entries, 5u);
  EXPECT_EQ(stats.run_plan.placed, 3u);
  EXPECT_EQ(stats.run_plan.ended_at, 3u);
  EXPECT_EQ(stats.run_plan.ended_by, End::fingerprint);
  EXPECT_EQ(stats.allocations, 5u);
  EXPECT_EQ(stats.frees, 1u);
  EXPECT_EQ(stats.live_allocations, 4u);
  EXPECT_EQ(stats.in_use_bytes, 4 * KiB * 3 + 8 * KiB);
  EXPECT_EQ(stats.limit_bytes, 64 * MiB);
  // While the plan was active the front held nothing; once it ended, the front serves small requests again (and
  // keeps blocks cached for this thread: the snapshot's "cached" blocks).
  EXPECT_EQ(snapshot_before_end.find("\"cached\""), std::string::npos);
  device->deallocate(device->allocate(4 * KiB));
  EXPECT_NE(device->snapshot().find("\"cached\""), std::string::npos);
}

TEST(EngineRunPlanFollow, StatsMeanWhatTheyMeanWithoutAPlan) {
  // The same requests with and without a plan: the counters of the program's memory agree; only placement differs.
  Stats with, without;
  for (const bool planned : {true, false}) {
    auto device = sim_allocator(64 * MiB);
    if (planned) {
      ASSERT_EQ(RunPlanLoader::install(*device, make_plan({{3 * MiB, 4 * MiB}, {100, 0}, {5 * MiB, 10 * MiB}},
                                                          64 * MiB)),
                "");
    }
    void* a = device->allocate(3 * MiB);
    void* b = device->allocate(100);
    void* c = device->allocate(5 * MiB);
    device->deallocate(a);
    (planned ? with : without) = device->stats();
    device->deallocate(b);
    device->deallocate(c);
  }
  EXPECT_EQ(with.run_plan.placed, 3u);
  EXPECT_EQ(without.run_plan.loaded, false);
  EXPECT_EQ(with.in_use_bytes, without.in_use_bytes);
  EXPECT_EQ(with.requested_bytes, without.requested_bytes);
  EXPECT_EQ(with.peak_in_use_bytes, without.peak_in_use_bytes);
  EXPECT_EQ(with.allocations, without.allocations);
  EXPECT_EQ(with.frees, without.frees);
  EXPECT_EQ(with.live_allocations, without.live_allocations);
  EXPECT_EQ(with.limit_bytes, without.limit_bytes);
  // Mapped: what the plan covers (granules 0, 2-3 and 5-7), never ahead of it.
  EXPECT_EQ(with.reserved_bytes, 6 * kGranule);
}

// A step of three requests (2, 3 and 1 MiB; the first two freed in the step, the last kept until the next).
void run_step(Allocator& device, void*& kept) {
  void* a = device.allocate(2 * MiB);
  void* b = device.allocate(3 * MiB);
  device.deallocate(a);
  if (kept != nullptr) device.deallocate(kept);
  kept = device.allocate(1 * MiB);
  device.deallocate(b);
}

// The run plan of steps 0 and 1 of run_step: addresses apart, as a packer that knew the run might lay them out.
RunPlan two_steps_plan(std::uint64_t limit) {
  return make_plan({{2 * MiB, 0}, {3 * MiB, 4 * MiB}, {1 * MiB, 2 * MiB},  // step 0
                    {2 * MiB, 8 * MiB}, {3 * MiB, 12 * MiB}, {1 * MiB, 16 * MiB}},  // step 1
                   limit);
}

TEST(EngineRunPlanFollow, APlanWithinTheLimitIsMappedWhenLoadedAndTheRunMapsNothingMore) {
  auto device = sim_allocator(64 * MiB);
  ASSERT_EQ(RunPlanLoader::install(*device, two_steps_plan(64 * MiB)), "");
  // Granules 0-4 and 6-8 (5 MiB of the 8-12 MiB gap is unplanned): 8 granules, in two map calls, before any allocation.
  Stats stats = device->stats();
  EXPECT_EQ(stats.reserved_bytes, 8 * kGranule);
  EXPECT_EQ(stats.run_plan.mapped_ahead, 8 * kGranule);
  EXPECT_EQ(stats.maps, 2u);
  void* kept = nullptr;
  device->step();
  run_step(*device, kept);
  device->step();
  run_step(*device, kept);
  stats = device->stats();
  EXPECT_EQ(stats.run_plan.placed, 6u);
  EXPECT_EQ(stats.maps, 2u) << "the plan's requests map nothing";
  EXPECT_EQ(stats.unmaps, 0u);
  device->deallocate(kept);
  // A plan covering more granules than the limit holds maps as its requests come (its unmaps make the room).
  auto tight = sim_allocator(6 * MiB);
  ASSERT_EQ(RunPlanLoader::install(*tight, make_plan({{2 * MiB, 0}, {2 * MiB, 8 * MiB}, {2 * MiB, 16 * MiB},
                                                      {2 * MiB, 24 * MiB}}, 6 * MiB)),
            "");
  EXPECT_EQ(tight->stats().reserved_bytes, 0u);
  EXPECT_EQ(tight->stats().run_plan.mapped_ahead, 0u);
}

TEST(EngineRunPlanFollow, StepPlansWaitForTheRunPlanAndTakeOverAtItsEnd) {
  auto device = sim_allocator(64 * MiB);
  ASSERT_EQ(RunPlanLoader::install(*device, two_steps_plan(64 * MiB)), "");
  void* kept = nullptr;
  device->step();  // the first boundary: step plans start watching
  run_step(*device, kept);
  device->step();  // without a run plan this boundary would pack and install a plan from step 0
  EXPECT_EQ(device->stats().step_plan.plans, 0u);
  EXPECT_EQ(device->stats().step_plan.packs, 0u);
  EXPECT_TRUE(device->stats().run_plan.active());
  run_step(*device, kept);
  EXPECT_EQ(device->stats().run_plan.placed, 6u);
  device->step();  // the run plan's last step is over: it ends here, and step plans pack from step 1
  Stats stats = device->stats();
  EXPECT_EQ(stats.run_plan.ended_by, End::finished);
  EXPECT_EQ(stats.run_plan.ended_at, 6u);
  EXPECT_EQ(stats.step_plan.plans, 1u);
  EXPECT_EQ(stats.step_plan.learning, 0u) << "the run plan's requests are not counted as best fit's";
  run_step(*device, kept);
  device->step();
  stats = device->stats();
  EXPECT_EQ(stats.step_plan.followed, 3u);
  EXPECT_EQ(stats.step_plan.fallbacks(), 0u);
  device->deallocate(kept);
}

TEST(EngineRunPlanFollow, APlanEndingMidStepLeavesTheStepToBestFitAndStepPlansPackAtTheNextBoundary) {
  auto device = sim_allocator(64 * MiB);
  RunPlan plan = two_steps_plan(64 * MiB);
  plan.entries[4].size = Heap::round(4 * MiB);  // step 1's second request is 3 MiB: the plan ends there
  plan.fingerprint.resize(4);                   // past the fingerprint: a plain size mismatch
  ASSERT_EQ(RunPlanLoader::install(*device, std::move(plan)), "");
  void* kept = nullptr;
  device->step();
  run_step(*device, kept);
  device->step();
  run_step(*device, kept);  // request 4 falls back, and request 5 with it
  Stats stats = device->stats();
  EXPECT_EQ(stats.run_plan.ended_by, End::size);
  EXPECT_EQ(stats.run_plan.ended_at, 4u);
  EXPECT_EQ(stats.run_plan.placed, 4u);
  EXPECT_EQ(stats.step_plan.learning, 2u) << "the rest of the step: best fit, watched";
  device->step();  // packs from step 1 (4 placed by the run plan, 2 by best fit), as a device without one would
  EXPECT_EQ(device->stats().step_plan.plans, 1u);
  run_step(*device, kept);
  device->step();
  stats = device->stats();
  EXPECT_EQ(stats.step_plan.followed, 3u);
  device->deallocate(kept);
}

TEST(EngineRunPlanFollow, NewLimitsDropThePlanAndLoadingAfterTheFirstAllocationIsRefused) {
  auto device = sim_allocator(64 * MiB);
  ASSERT_EQ(RunPlanLoader::install(*device, two_steps_plan(64 * MiB)), "");
  device->set_limits(DeviceLimits{.policy = {}, .limit_bytes = 32 * MiB});  // the plan was checked against 64 MiB
  EXPECT_FALSE(device->stats().run_plan.loaded);
  EXPECT_THAT(RunPlanLoader::install(*device, two_steps_plan(64 * MiB)), HasSubstr("limit"));
  ASSERT_EQ(RunPlanLoader::install(*device, two_steps_plan(32 * MiB)), "");
  try {  // one plan per device: a second would map its granules beside the first's
    (void)RunPlanLoader::install(*device, two_steps_plan(32 * MiB));
    FAIL() << "a second run plan must be refused";
  } catch (const InvalidState& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("already"), HasSubstr("test.plan"), HasSubstr("one plan per device")));
  }
  EXPECT_EQ(device->stats().run_plan.mapped_ahead, 8 * kGranule);
  EXPECT_EQ(device->stats().reserved_bytes, 8 * kGranule);
  void* block = device->allocate(2 * MiB);
  EXPECT_EQ(device->stats().run_plan.placed, 1u);
  try {
    (void)RunPlanLoader::install(*device, two_steps_plan(64 * MiB));
    FAIL() << "a run plan after the first allocation must be refused";
  } catch (const InvalidState& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("after its first allocation"), HasSubstr("before the device allocates")));
  }
  device->deallocate(block);
}

TEST(EngineRunPlanFollow, APlanForAHigherLimitIsIgnoredAndTheDeviceRunsAsWithoutOne) {
  auto device = sim_allocator(32 * MiB);
  const std::string why = RunPlanLoader::install(*device, two_steps_plan(64 * MiB));
  EXPECT_THAT(why, AllOf(HasSubstr("limit of 67108864 bytes"), HasSubstr("33554432"), HasSubstr("pack it again")));
  void* a = device->allocate(2 * MiB);
  const Stats stats = device->stats();
  EXPECT_FALSE(stats.run_plan.loaded);
  EXPECT_EQ(stats.run_plan.placed, 0u);
  device->deallocate(a);
}

TEST(EngineRunPlanFollow, APlanPackedForALowerLimitIsFollowed) {
  auto device = sim_allocator(64 * MiB);
  ASSERT_EQ(RunPlanLoader::install(*device, two_steps_plan(32 * MiB)), "");
  void* kept = nullptr;
  device->step();
  run_step(*device, kept);
  device->step();
  run_step(*device, kept);
  EXPECT_EQ(device->stats().run_plan.placed, 6u);
  EXPECT_EQ(device->stats().limit_bytes, 64 * MiB) << "the device's limit is its own";
  device->deallocate(kept);
}

// A release threshold (plimsoll run sets one on host devices) would give the mapped-ahead granules back at the first
// free and the plan map them again: it waits while the plan is active, and applies again once it ended.
TEST(EngineRunPlanFollow, AReleaseThresholdKeepsThePlansGranulesWhileItIsActive) {
  DeviceDescription description = sim_device(64 * MiB);
  description.policy.release_threshold = 0;
  Allocator device(description, std::make_unique<backings::SimBacking>(4ull << 30));
  ASSERT_EQ(RunPlanLoader::install(device, two_steps_plan(64 * MiB)), "");
  void* kept = nullptr;
  device.step();
  run_step(device, kept);
  device.step();
  run_step(device, kept);
  Stats stats = device.stats();
  EXPECT_EQ(stats.run_plan.placed, 6u);
  EXPECT_EQ(stats.maps, 2u) << "the plan's requests map nothing: its granules were kept";
  EXPECT_EQ(stats.unmaps, 0u);
  device.step();  // the plan ends here (finished): the threshold applies again at the next free
  EXPECT_EQ(device.stats().run_plan.ended_by, End::finished);
  device.deallocate(kept);
  stats = device.stats();
  EXPECT_GT(stats.unmaps, 0u);
  EXPECT_EQ(stats.reserved_bytes, 0u);
}

// Runtime::configure reads the new policy's plan before it changes anything: a missing file leaves the device as it
// was (its limit, its policy) and the runtime's config too.
TEST(EngineRunPlanFollow, AConfigureWithAMissingPlanChangesNothing) {
  Config config;
  config.log_device_creation = false;
  config.default_policy.memory_limit = 64 * MiB;
  Runtime runtime(config);
  Allocator& device = runtime.device("sim:4GiB");
  Policy policy = runtime.policy_for("sim:4GiB");
  policy.memory_limit = 32 * MiB;
  policy.run_plan = "/nonexistent/job.plan";
  try {
    runtime.configure("sim:4GiB", policy);
    FAIL() << "a missing run plan must fail the configure";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("/nonexistent/job.plan"));
  }
  EXPECT_EQ(device.description().limit_bytes, 64 * MiB);
  EXPECT_FALSE(device.description().policy.run_plan.has_value());
  EXPECT_EQ(*runtime.policy_for("sim:4GiB").memory_limit, 64 * MiB);
  // The same configure with a plan that reads: applied, and the plan loaded for the new limit.
  const std::string path = ::testing::TempDir() + "engine_run_plan_follow_configure.plan";
  write_run_plan(two_steps_plan(32 * MiB), path);
  policy.run_plan = path;
  runtime.configure("sim:4GiB", policy);
  EXPECT_EQ(device.description().limit_bytes, 32 * MiB);
  EXPECT_TRUE(device.stats().run_plan.loaded);
}

TEST(EngineRunPlanFollow, AMissingOrMalformedPlanFileIsAnErrorNamingTheFile) {
  auto device = sim_allocator(64 * MiB);
  try {
    (void)device->set_run_plan("/nonexistent/run.plan");
    FAIL() << "a missing plan must throw";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("/nonexistent/run.plan"));
  }
}

// The policy's run_plan (a config key, PLIMSOLL_RUN_PLAN) reaches a device the runtime makes, before its first
// allocation; a plan for another limit leaves it running without one; a missing file fails the device's creation.
TEST(EngineRunPlanFollow, TheRuntimeLoadsThePolicysRunPlan) {
  const std::string path = ::testing::TempDir() + "engine_run_plan_follow_runtime.plan";
  write_run_plan(two_steps_plan(64 * MiB), path);
  for (const std::uint64_t limit : {64 * MiB, 32 * MiB}) {
    Config config;
    config.log_device_creation = false;
    config.default_policy.memory_limit = limit;
    config.default_policy.run_plan = path;
    Runtime runtime(config);
    Allocator& device = runtime.device("sim:4GiB");
    void* block = device.allocate(2 * MiB);
    EXPECT_EQ(device.stats().run_plan.loaded, limit == 64 * MiB);
    EXPECT_EQ(device.stats().run_plan.placed, limit == 64 * MiB ? 1u : 0u);
    device.deallocate(block);
  }
  Config missing;
  missing.log_device_creation = false;
  missing.default_policy.run_plan = "/nonexistent/job.plan";
  Runtime runtime(missing);
  try {
    (void)runtime.device("sim:4GiB");
    FAIL() << "a missing run plan must fail the device's creation";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("/nonexistent/job.plan"));
  }
}

}  // namespace
}  // namespace plimsoll::engine
