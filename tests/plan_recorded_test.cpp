// The step model on real recordings of `plimsoll train` (tests/data/plan): the prediction at batch 32 from the
// batch-8 and batch-16 runs equals the batch-32 run's own replay under every allocator, every allocation fits a
// constant or a line, and what fills the peak is named by the recorded tags.
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "plan_fixtures.hpp"
#include "plimsoll/plan.hpp"
#include "plimsoll/trace.hpp"

namespace plimsoll {
namespace {

constexpr std::uint64_t kDevice = std::uint64_t{16} << 30;

StepModel recorded_model(const std::vector<std::uint64_t>& batches) {
  std::vector<RecordedJob> jobs;
  for (const std::uint64_t batch : batches) jobs.push_back({.trace = read_trace(testing::recorded_cnn(batch))});
  return StepModel::build(std::move(jobs));
}

TEST(PlanRecorded, Batch32FromBatches8And16MatchesTheBatch32Run) {
  const StepModel model = recorded_model({8, 16});
  EXPECT_EQ(model.job(), "fashion_cnn");
  EXPECT_EQ(model.steps(), 3u);
  const Prediction predicted = predict(model, 32, kDevice);
  const Prediction recorded = predict(recorded_model({32}), 32, kDevice);
  ASSERT_EQ(predicted.allocators.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    SCOPED_TRACE(std::string(to_string(predicted.allocators[i].allocator)));
    EXPECT_EQ(predicted.allocators[i].peak_live_bytes, recorded.allocators[i].peak_live_bytes);
    EXPECT_EQ(predicted.allocators[i].peak_reserved_bytes, recorded.allocators[i].peak_reserved_bytes);
  }
  EXPECT_EQ(predicted.allocators[0].peak_fill.front().name, "activations");
}

TEST(PlanRecorded, EveryAllocationFitsAConstantOrALine) {
  const FitSummary summary = recorded_model({8, 16, 32}).fit_summary();
  EXPECT_EQ(summary.batch, 32u);
  EXPECT_GT(summary.counts[static_cast<int>(SizeFit::constant)], 0u);
  EXPECT_GT(summary.counts[static_cast<int>(SizeFit::linear)], 0u);
  EXPECT_EQ(summary.counts[static_cast<int>(SizeFit::none)], 0u);
  EXPECT_EQ(summary.counts[static_cast<int>(SizeFit::unmatched)], 0u);
  EXPECT_TRUE(summary.largest_unclean.empty());
}

TEST(PlanRecorded, TheWeightsAreWhatLivesBeforeTheFirstStep) {
  // FashionCnn's parameters: 206970 floats (README), plus padding of the small ones.
  const std::uint64_t fixed = recorded_model({8, 16}).fixed_bytes();
  EXPECT_GE(fixed, 206970u * 4);
  EXPECT_LT(fixed, 206970u * 4 + 4096);
}

}  // namespace
}  // namespace plimsoll
