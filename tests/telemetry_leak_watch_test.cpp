// The leak watch on hand-made steps: warm-up, caches that fill and stop, leaks every step or every few steps, frees
// it never saw, misuse of the step calls, and the groups a report names (tag, call site, position in the step).
#include <cstdint>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "plimsoll/error.hpp"
#include "plimsoll/trace.hpp"
#include "telemetry/leaks/leak_watch.hpp"

namespace plimsoll::telemetry {
namespace {

using ::testing::HasSubstr;

// A training loop in miniature: every step makes activations it frees itself and gradients the next step frees,
// so nothing outlives the step after its own unless a test keeps it.
class Loop {
 public:
  struct Kept {
    std::uint64_t bytes = 0;
    std::uint16_t tag = 0;
    std::uint32_t site = 0;
  };

  // Runs the next step; `kept` are allocated after the step's first two allocations and never freed.
  void step(const std::vector<Kept>& kept = {}) {
    watch.on_step_begin(number_);
    const std::uint64_t activations = next_id_++;
    watch.on_allocate(activations, 4096);
    const std::uint64_t gradients = next_id_++;
    watch.on_allocate(gradients, 8192);
    for (const Kept& keep : kept) {
      const std::uint64_t id = next_id_++;
      watch.on_allocate(id, keep.bytes, keep.tag, keep.site);
      kept_ids.push_back(id);
    }
    if (previous_gradients_ != 0) watch.on_free(previous_gradients_);
    previous_gradients_ = gradients;
    watch.on_free(activations);
    watch.on_step_end(number_);
    ++number_;
  }
  void steps(int count) {
    for (int i = 0; i < count; ++i) step();
  }

  LeakWatch watch;
  std::vector<std::uint64_t> kept_ids;

 private:
  int number_ = 0;
  std::uint64_t next_id_ = 1;
  std::uint64_t previous_gradients_ = 0;
};

TEST(LeakWatch, NothingKeptPastTheNextStepIsNoGrowth) {
  Loop loop;
  loop.steps(20);
  const LeakReport report = loop.watch.report();
  EXPECT_EQ(report.verdict, LeakVerdict::no_growth);
  EXPECT_FALSE(report.leak());
  EXPECT_EQ(report.steps, 20u);
  EXPECT_EQ(report.retained_bytes, 0u);
  EXPECT_EQ(report.bytes_per_step, 0);
  EXPECT_TRUE(report.groups.empty());
  // Only the last step's gradients are live: they have not yet met the next step.
  EXPECT_EQ(loop.watch.live_allocations(), 1u);
}

TEST(LeakWatch, StateMadeInTheFirstStepIsWarmupNotGrowth) {
  Loop loop;
  loop.step({{.bytes = 1 << 20}, {.bytes = 1 << 20}});  // optimizer state, made once
  loop.steps(15);
  const LeakReport report = loop.watch.report();
  EXPECT_EQ(report.verdict, LeakVerdict::no_growth);
  EXPECT_EQ(report.warmup_bytes, std::uint64_t{2} << 20);
  EXPECT_EQ(report.retained_bytes, 0u);
}

TEST(LeakWatch, CacheThatFillsForFiveStepsAndStopsIsWarmupOnceStoppedForTwiceItsSpacing) {
  Loop loop;
  loop.step();
  for (int i = 0; i < 5; ++i) loop.step({{.bytes = 1000}});  // steps 1..5 fill the cache
  // Step 5's entry is seen at the end of step 6. Until growth has paused for two step ends it still reads as
  // growing; then it is warm-up, and stays so.
  loop.step();
  EXPECT_EQ(loop.watch.report().verdict, LeakVerdict::leak);
  loop.step();
  EXPECT_EQ(loop.watch.report().verdict, LeakVerdict::leak);
  loop.step();
  for (int i = 0; i < 30; ++i) {
    const LeakReport report = loop.watch.report();
    ASSERT_EQ(report.verdict, LeakVerdict::warmup_growth) << "after step " << report.steps - 1;
    EXPECT_EQ(report.bytes_per_step, 0);
    EXPECT_EQ(report.steps_since_growth, static_cast<std::size_t>(2 + i));
    loop.step();
  }
  const LeakReport report = loop.watch.report();
  EXPECT_EQ(report.retained_bytes, 5000u);
  EXPECT_EQ(report.retained_allocations, 5u);
}

TEST(LeakWatch, ThreeStepsOrFewerAreNeverALeak) {
  Loop loop;
  for (int i = 0; i < 3; ++i) {
    loop.step({{.bytes = 1 << 24}});
    EXPECT_EQ(loop.watch.report().verdict, LeakVerdict::too_few_steps);
  }
  loop.step({{.bytes = 1 << 24}});
  EXPECT_EQ(loop.watch.report().verdict, LeakVerdict::leak);
}

// A leak of `bytes` every `every` steps from step `first` on.
struct Rhythm {
  int every = 1;
  int first = 1;
};

class LeakRhythm : public ::testing::TestWithParam<Rhythm> {};

TEST_P(LeakRhythm, IsFoundWithinSixStepsAtTheExactRateAndStaysFound) {
  const Rhythm rhythm = GetParam();
  constexpr std::uint64_t kLeak = 3000;
  Loop loop;
  for (int step = 0; step < 40; ++step) {
    const bool leaks = step >= rhythm.first && (step - rhythm.first) % rhythm.every == 0;
    loop.step(leaks ? std::vector<Loop::Kept>{{.bytes = kLeak}} : std::vector<Loop::Kept>{});
    const LeakReport report = loop.watch.report();
    if (step < rhythm.first + 6) continue;
    ASSERT_TRUE(report.leak()) << "step " << step << ": " << to_string(report.verdict);
    EXPECT_DOUBLE_EQ(report.bytes_per_step, static_cast<double>(kLeak) / rhythm.every);
    EXPECT_DOUBLE_EQ(report.allocations_per_step, 1.0 / rhythm.every);
    EXPECT_DOUBLE_EQ(report.growth_every_steps, rhythm.every);
  }
  const LeakReport report = loop.watch.report();
  ASSERT_FALSE(report.groups.empty());
  // The groups cover the window's steps only: the watch forgets older growth.
  EXPECT_GE(report.groups.front().first_step, 40 - static_cast<int>(LeakWatch::kWindowSteps) - 1);
  EXPECT_EQ(report.groups.front().position, 3u);
}

INSTANTIATE_TEST_SUITE_P(EveryStepAndEveryFew, LeakRhythm,
                         ::testing::Values(Rhythm{1, 1}, Rhythm{2, 1}, Rhythm{3, 1}, Rhythm{1, 4}, Rhythm{2, 3},
                                           Rhythm{3, 2}));

TEST(LeakWatch, LeakThatStopsBecomesWarmupAndOneThatStartsLaterIsMeasuredWithoutTheOldGrowth) {
  Loop loop;
  loop.step();
  for (int i = 0; i < 5; ++i) loop.step({{.bytes = 100000}});  // a cache fills in steps 1..5
  loop.steps(34);
  ASSERT_EQ(loop.watch.report().verdict, LeakVerdict::warmup_growth);
  for (int i = 0; i < 40; ++i) loop.step({{.bytes = 700}});
  const LeakReport report = loop.watch.report();
  ASSERT_TRUE(report.leak());
  EXPECT_DOUBLE_EQ(report.bytes_per_step, 700.0);
  EXPECT_EQ(report.retained_bytes, 500000u + 39u * 700u);  // the last step's leak is not yet retained
}

TEST(LeakWatch, GrowthRarerThanHalfTheWindowIsNotALeak) {
  Loop loop;
  const int every = static_cast<int>(LeakWatch::kWindowSteps / 2) + 1;
  for (int step = 0; step < 100; ++step) loop.step(step % every == 1 ? std::vector<Loop::Kept>{{.bytes = 500}}
                                                                     : std::vector<Loop::Kept>{});
  EXPECT_EQ(loop.watch.report().verdict, LeakVerdict::warmup_growth);
}

TEST(LeakWatch, CacheThatReplacesItsEntriesIsNotALeak) {
  // An LRU cache of four entries: each step adds one, and once full evicts the oldest. Memory is retained at every
  // step, but it stopped growing once the cache was full.
  LeakWatch watch;
  std::vector<std::uint64_t> entries;
  std::uint64_t next_id = 1;
  for (int step = 0; step < 30; ++step) {
    watch.on_step_begin(step);
    if (step > 0) {
      entries.push_back(next_id);
      watch.on_allocate(next_id++, 2048 + static_cast<std::uint64_t>(step * 37 % 11) * 64);
      if (entries.size() > 4) {
        watch.on_free(entries.front());
        entries.erase(entries.begin());
      }
    }
    watch.on_step_end(step);
  }
  EXPECT_EQ(watch.report().verdict, LeakVerdict::warmup_growth);
}

TEST(LeakWatch, FreesOfIdsNeverSeenAreIgnored) {
  LeakWatch watch;
  watch.on_allocate(7, 1000);  // before the first step: building the model, not watched
  watch.on_step_begin(1);
  watch.on_free(7);
  watch.on_free(12345);
  watch.on_allocate(8, 64);
  watch.on_step_end(1);
  EXPECT_EQ(watch.live_allocations(), 1u);
  EXPECT_EQ(watch.report().warmup_bytes, 64u);
}

TEST(LeakWatch, AnIdAllocatedAgainWhileLiveStartsAfresh) {
  LeakWatch watch;
  for (int step = 0; step < 6; ++step) {
    watch.on_step_begin(step);
    if (step == 1) watch.on_allocate(42, 1000);  // kept...
    if (step == 4) watch.on_allocate(42, 10);    // ...until its free was lost and the id came back
    watch.on_step_end(step);
  }
  const LeakReport report = watch.report();
  EXPECT_EQ(watch.live_allocations(), 1u);
  EXPECT_EQ(report.retained_bytes, 10u);
  EXPECT_EQ(report.retained_allocations, 1u);
}

TEST(LeakWatch, StepCallsOutOfOrderThrowInvalidStateNamingTheFix) {
  LeakWatch watch;
  try {
    watch.on_step_end(1);
    FAIL() << "ending a step that never began must throw";
  } catch (const InvalidState& error) {
    EXPECT_THAT(error.what(), HasSubstr("no step is open; begin step 1 first"));
  }
  watch.on_step_begin(1);
  try {
    watch.on_step_begin(2);
    FAIL() << "beginning a step inside another must throw";
  } catch (const InvalidState& error) {
    EXPECT_THAT(error.what(), HasSubstr("step 1 is still open; end step 1 first"));
  }
  try {
    watch.on_step_end(2);
    FAIL() << "ending another step than the open one must throw";
  } catch (const InvalidState& error) {
    EXPECT_THAT(error.what(), HasSubstr("step 2 ends while step 1 is open"));
  }
  // The failed calls changed nothing: step 1 is still open and ends normally.
  EXPECT_NO_THROW(watch.on_step_end(1));
  EXPECT_EQ(watch.report().steps, 1u);
}

TEST(LeakWatch, GroupsGatherByCallSiteAndTagWithSizesAndSteps) {
  Loop loop;
  loop.step();
  for (int i = 1; i <= 8; ++i) {
    // Two leaks from one site with varying sizes, another from a second site with a tag.
    loop.step({{.bytes = 100 * static_cast<std::uint64_t>(i), .site = 3},
               {.bytes = 50, .tag = 2, .site = 4}});
  }
  loop.steps(1);
  const LeakReport report = loop.watch.report();
  ASSERT_TRUE(report.leak());
  ASSERT_EQ(report.groups.size(), 2u);
  const LeakGroup& big = report.groups[0];
  EXPECT_EQ(big.site, 3u);
  EXPECT_EQ(big.tag, 0u);
  EXPECT_EQ(big.allocations, 8u);
  EXPECT_EQ(big.bytes, 3600u);
  EXPECT_EQ(big.smallest, 100u);
  EXPECT_EQ(big.largest, 800u);
  EXPECT_EQ(big.first_step, 1);
  EXPECT_EQ(big.last_step, 8);
  const LeakGroup& tagged = report.groups[1];
  EXPECT_EQ(tagged.site, 4u);
  EXPECT_EQ(tagged.tag, 2u);
  EXPECT_EQ(tagged.bytes, 400u);

  const std::vector<std::string> tags = {"", "activations", "optimizer"};
  const std::vector<std::string> sites = {"", "a", "b", "make_batch (loader.py:12)", "log_loss (train.py:40)"};
  EXPECT_EQ(describe_origin(big, tags, sites), "make_batch (loader.py:12)");
  EXPECT_EQ(describe_origin(tagged, tags, sites), "log_loss (train.py:40), tag 'optimizer'");
  EXPECT_EQ(describe_origin(tagged, {}, {}), "call site #4, tag #2");
}

TEST(LeakWatch, WithoutCallSitesGroupsArePositionsInTheStepOrBetweenSteps) {
  LeakWatch watch;
  std::uint64_t next_id = 1;
  for (int step = 0; step < 8; ++step) {
    watch.on_allocate(next_id++, 30);  // between steps (before step 0: not watched)
    watch.on_step_begin(step);
    const std::uint64_t transient = next_id++;
    watch.on_allocate(transient, 500);
    watch.on_allocate(next_id++, 70);  // position 2 of the step, kept
    watch.on_free(transient);
    watch.on_step_end(step);
  }
  const LeakReport report = watch.report();
  ASSERT_TRUE(report.leak());
  ASSERT_EQ(report.groups.size(), 2u);
  EXPECT_EQ(report.groups[0].position, 2u);
  EXPECT_FALSE(report.groups[0].between_steps);
  EXPECT_EQ(report.groups[0].allocations, 6u);  // steps 1..6: the step 0 ones are warm-up, step 7's not yet kept
  EXPECT_EQ(report.groups[1].position, 1u);
  EXPECT_TRUE(report.groups[1].between_steps);
  EXPECT_EQ(report.groups[1].first_step, 1);  // made before step 1 began: counted as step 1's
  EXPECT_DOUBLE_EQ(report.bytes_per_step, 100.0);
  EXPECT_EQ(describe_origin(report.groups[0], {}, {}), "allocation #2 of the step");
  EXPECT_EQ(describe_origin(report.groups[1], {}, {}), "allocation #1 between steps");
}

TEST(LeakWatch, FindLeaksFeedsStepsOnlyAndCountsBetweenStepEventsAsTheNextStep) {
  std::string text = "a 1 5000\n";  // the model, made before the steps
  int id = 2;
  for (int step = 0; step < 6; ++step) {
    text += "a " + std::to_string(id++) + " 40\n";  // between steps: a leak counted as the next step's
    text += "# step " + std::to_string(step) + " begin\n";
    text += "a " + std::to_string(id) + " 900\nf " + std::to_string(id) + "\n";
    ++id;
    text += "# step " + std::to_string(step) + " end\n";
  }
  text += "f 1\n";  // teardown: frees the model, never fed
  const Trace trace = parse_trace(text, "between.trace");
  const LeakReport report = find_leaks(trace);
  EXPECT_TRUE(report.leak());
  EXPECT_EQ(report.steps, 6u);
  EXPECT_DOUBLE_EQ(report.bytes_per_step, 40.0);
  ASSERT_EQ(report.groups.size(), 1u);
  EXPECT_TRUE(report.groups[0].between_steps);
  EXPECT_EQ(report.warmup_bytes, 0u);  // the allocation before step 0's begin is before the first step
}

TEST(LeakWatch, FindLeaksOnATraceWithoutStepsHasNoVerdict) {
  const Trace trace = parse_trace("a 1 100\na 2 100\nf 1\n", "flat.trace");
  const LeakReport report = find_leaks(trace);
  EXPECT_EQ(report.verdict, LeakVerdict::too_few_steps);
  EXPECT_EQ(report.steps, 0u);
}

TEST(LeakWatch, VerdictNamesAreTheJsonSpelling) {
  EXPECT_STREQ(to_string(LeakVerdict::too_few_steps), "too_few_steps");
  EXPECT_STREQ(to_string(LeakVerdict::no_growth), "no_growth");
  EXPECT_STREQ(to_string(LeakVerdict::warmup_growth), "warmup_growth");
  EXPECT_STREQ(to_string(LeakVerdict::leak), "leak");
}

}  // namespace
}  // namespace plimsoll::telemetry
