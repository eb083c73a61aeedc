// Drives the engine with millions of mixed operations and checks it with an independent model: local
// invariants on every operation, a walk of the whole heap every 4096 operations.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <vector>

#include "backings/faulty_backing.hpp"
#include "backings/sim_backing.hpp"
#include "engine/heap.hpp"
#include "engine_heap_checker.hpp"
#include "plimsoll/trace.hpp"

namespace plimsoll::engine {
namespace {

constexpr std::uint64_t MiB = 1ull << 20;
constexpr std::uint64_t GiB = 1ull << 30;

std::uint64_t operations() {
  const char* text = std::getenv("PLIMSOLL_RANDOM_OPS");  // sanitizer builds run fewer
  return text ? std::strtoull(text, nullptr, 10) : 10'000'000ull;
}

// Request sizes seen in real training steps, to draw from.
std::vector<std::uint64_t> trace_sizes() {
  std::vector<std::uint64_t> sizes;
  for (const auto& entry : std::filesystem::directory_iterator(PLIMSOLL_TRACES_DIR)) {
    if (entry.path().extension() != ".trace") continue;
    Trace trace = read_trace(entry.path().string());
    for (const TraceEvent& event : trace.events)
      if (event.kind == TraceEvent::Kind::allocate) sizes.push_back(event.bytes);
  }
  return sizes;
}

class SizeSource {
 public:
  explicit SizeSource(std::uint64_t seed) : random_(seed), traces_(trace_sizes()) {}
  std::uint64_t next() {
    switch (random_() % 4) {
      case 0:
      case 1:
        if (!traces_.empty()) return traces_[random_() % traces_.size()];
        [[fallthrough]];
      case 2: {  // heavy tail: Pareto, alpha 1.2, from 1 KiB
        double u = std::uniform_real_distribution<double>(1e-9, 1.0)(random_);
        return std::min<std::uint64_t>(static_cast<std::uint64_t>(1024.0 / std::pow(u, 1.0 / 1.2)), 512 * MiB);
      }
      default:  // small, with zero-byte requests now and then
        return random_() % 4097;
    }
  }
  std::mt19937_64& random() { return random_; }

 private:
  std::mt19937_64 random_;
  std::vector<std::uint64_t> traces_;
};

void run(backings::Backing& backing, HeapOptions options, std::uint64_t ops, std::uint64_t seed,
         bool expect_device_failures) {
  Heap heap(backing, options);
  testing::HeapChecker check(heap);
  SizeSource sizes(seed);
  auto& random = sizes.random();
  std::vector<std::uint64_t> live;
  std::uint64_t ooms = 0;
  for (std::uint64_t op = 1; op <= ops; ++op) {
    const bool allocate = live.empty() || (random() % 100) < (live.size() < 2000 ? 55u : 45u);
    if (allocate) {
      const std::uint64_t bytes = sizes.next();
      const std::uint64_t addr = heap.allocate(bytes, static_cast<std::uint16_t>(random() % 8));
      if (addr == 0) {
        ++ooms;
        const HeapFailure why = heap.last_failure();
        ASSERT_TRUE(why == HeapFailure::limit || why == HeapFailure::address_space ||
                    (expect_device_failures && why == HeapFailure::device))
            << "unexpected failure kind " << static_cast<int>(why);
      } else {
        ASSERT_NO_FATAL_FAILURE(check.allocated(addr, bytes));
        live.push_back(addr);
      }
    } else {
      const std::size_t pick = random() % live.size();
      Heap::Freed freed;
      ASSERT_TRUE(heap.deallocate(live[pick], freed));
      ASSERT_NO_FATAL_FAILURE(check.freed(live[pick]));
      live[pick] = live.back();
      live.pop_back();
    }
    if (random() % 100000 == 0) heap.release_cached();
    if (op % 4096 == 0) {
      ASSERT_NO_FATAL_FAILURE(check.walk()) << "after operation " << op;
    }
  }
  for (std::uint64_t addr : live) {
    Heap::Freed freed;
    ASSERT_TRUE(heap.deallocate(addr, freed));
    check.freed(addr);
  }
  ASSERT_NO_FATAL_FAILURE(check.walk());
  EXPECT_EQ(heap.counters().in_use, 0u);
  heap.release_cached();
  if (!options.preallocate) {
    EXPECT_EQ(heap.mapped_bytes(), 0u) << "memory stayed mapped after everything was freed";
  }
  ::testing::Test::RecordProperty("ooms", static_cast<int>(ooms));
}

TEST(EngineRandom, OnDemandTenMillionOperations) {
  backings::SimBacking sim(8 * GiB);
  HeapOptions options;
  options.limit = 768 * MiB;
  run(sim, options, operations(), 1, false);
}

TEST(EngineRandom, PreallocateUnderPressure) {
  backings::SimBacking sim(8 * GiB);
  HeapOptions options;
  options.limit = 512 * MiB;
  options.preallocate = true;
  run(sim, options, operations() / 10, 2, false);
}

TEST(EngineRandom, ReleaseThresholdAndExactGrowth) {
  backings::SimBacking sim(8 * GiB);
  HeapOptions options;
  options.limit = 640 * MiB;
  options.release_threshold = 64 * MiB;
  options.growth_factor = 1.0;
  run(sim, options, operations() / 10, 3, false);
}

// Fault injection: a backing that refuses maps at random. Every refusal must end in a clean failure,
// with the invariants held and nothing left mapped at the end.
TEST(EngineRandom, FailingBackingEndsInCleanOutOfMemory) {
  backings::SimBacking sim(8 * GiB);
  backings::FaultyBacking faulty(sim, backings::FaultPlan{.map_failure_probability = 0.2, .seed = 42});
  HeapOptions options;
  options.limit = 1 * GiB;
  options.release_threshold = 32 * MiB;
  options.growth_factor = 1.0;
  run(faulty, options, operations() / 10, 4, true);
  EXPECT_GT(faulty.injected_map_failures(), 0u);
  EXPECT_EQ(sim.mapped_bytes(), 0u);
}

}  // namespace
}  // namespace plimsoll::engine
