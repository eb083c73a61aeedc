// The step model of `plimsoll plan` on synthetic jobs whose sizes are exactly constant or linear in the batch size:
// a prediction must equal, byte for byte, the trace written at that batch size; fits are classified; bad input is
// refused with what to record instead.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "plan/step_sequence.hpp"
#include "plan_fixtures.hpp"
#include "plimsoll/error.hpp"
#include "plimsoll/allocator.hpp"
#include "plimsoll/plan.hpp"
#include "plimsoll/policy.hpp"
#include "plimsoll/recording.hpp"
#include "plimsoll/runtime.hpp"
#include "plimsoll/size.hpp"
#include "plimsoll/trace.hpp"

namespace plimsoll {
namespace {

using ::testing::HasSubstr;
using testing::toy_trace;
using testing::ToyStep;

constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;

RecordedJob toy_job(std::uint64_t batch, const ToyStep& toy = {}) {
  return {.trace = parse_trace(toy_trace(batch, toy), "toy-b" + std::to_string(batch) + ".trace")};
}

StepModel toy_model(std::vector<std::uint64_t> batches, const ToyStep& toy = {}) {
  std::vector<RecordedJob> jobs;
  for (const std::uint64_t batch : batches) jobs.push_back(toy_job(batch, toy));
  return StepModel::build(std::move(jobs));
}

std::vector<std::uint64_t> allocation_sizes(const Trace& trace) {
  std::vector<std::uint64_t> sizes;
  for (const TraceEvent& event : trace.events) {
    if (event.kind == TraceEvent::Kind::allocate) sizes.push_back(event.bytes);
  }
  return sizes;
}

std::string build_error(std::vector<RecordedJob> jobs) {
  try {
    StepModel::build(std::move(jobs));
  } catch (const InvalidArgument& error) {
    return error.what();
  }
  return "no error";
}

TEST(PlanStepModel, RebuildsALinearStepExactlyAtAnyBatchSize) {
  const StepModel model = toy_model({8, 16});
  EXPECT_EQ(model.batches(), (std::vector<std::uint64_t>{8, 16}));
  EXPECT_EQ(model.steps(), 3u);
  EXPECT_EQ(model.job(), "toy");
  for (const std::uint64_t batch : std::vector<std::uint64_t>{1, 8, 12, 16, 64, 1000}) {
    const Trace expected = parse_trace(toy_trace(batch), "expected");
    const Trace rebuilt = model.rebuild(batch);
    EXPECT_EQ(allocation_sizes(rebuilt), allocation_sizes(expected)) << "batch " << batch;
    EXPECT_EQ(rebuilt.peak_live_bytes, expected.peak_live_bytes) << "batch " << batch;
    EXPECT_EQ(rebuilt.steps.size(), 3u);
  }
}

TEST(PlanStepModel, PredictsWhatTheRunAtThatBatchSizeGivesUnderEveryAllocator) {
  const StepModel from_two = toy_model({8, 16});
  std::vector<RecordedJob> only;
  only.push_back(toy_job(96));
  const StepModel recorded = StepModel::build(std::move(only));
  const Prediction predicted = predict(from_two, 96, 16 * kGiB);
  const Prediction actual = predict(recorded, 96, 16 * kGiB);
  ASSERT_EQ(predicted.allocators.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    SCOPED_TRACE(std::string(to_string(predicted.allocators[i].allocator)));
    EXPECT_EQ(predicted.allocators[i].peak_live_bytes, actual.allocators[i].peak_live_bytes);
    EXPECT_EQ(predicted.allocators[i].peak_reserved_bytes, actual.allocators[i].peak_reserved_bytes);
    EXPECT_TRUE(predicted.allocators[i].fits);
    EXPECT_GE(predicted.allocators[i].peak_reserved_bytes, predicted.allocators[i].peak_live_bytes);
  }
  // The peak at batch 96: weights 5096 + step 1's activation 96000 + output 9608 + the temporary 49216 (freed
  // before the output) does not overlap it; what is live at once is the activation, the output, the gradients.
  EXPECT_EQ(predicted.allocators[0].peak_live_bytes, parse_trace(toy_trace(96), "x").peak_live_bytes);
}

TEST(PlanStepModel, ClassifiesConstantLinearAndNeither) {
  const StepModel model = toy_model({8, 16, 32}, {.quadratic = true});
  const FitSummary summary = model.fit_summary();
  EXPECT_EQ(summary.batch, 32u);
  // Per recording: 2 weights + per step (activation, temporary, output, quadratic) + 2 gradients + 1 state.
  EXPECT_EQ(summary.allocations, 2u + 3 * 4 + 2 + 1);
  EXPECT_EQ(summary.counts[static_cast<int>(SizeFit::constant)], 5u);
  EXPECT_EQ(summary.counts[static_cast<int>(SizeFit::linear)], 9u);
  EXPECT_EQ(summary.counts[static_cast<int>(SizeFit::none)], 3u);
  ASSERT_EQ(summary.largest_unclean.size(), 3u);
  EXPECT_EQ(summary.largest_unclean.front().fit, SizeFit::none);
  EXPECT_THAT(summary.largest_unclean.front().where, HasSubstr("step"));
  EXPECT_EQ(summary.largest_unclean.front().sizes.size(), 3u);
  // Between recorded sizes a size that fits neither is interpolated: 16 * 24^2 lies between 16 * 16^2 and
  // 16 * 32^2, on the chord, not on the parabola.
  const Trace at_24 = model.rebuild(24);
  const std::vector<std::uint64_t> sizes = allocation_sizes(at_24);
  const std::uint64_t chord = 16 * 256 + (16 * 1024 - 16 * 256) / 2;
  EXPECT_NE(std::find(sizes.begin(), sizes.end(), chord), sizes.end());
}

TEST(PlanStepModel, AnAllocationOnlyOneRecordingHasIsUnmatchedAndKeptAsRecorded) {
  std::vector<RecordedJob> jobs;
  jobs.push_back(toy_job(8));
  jobs.push_back(toy_job(16, {.extra_in_step_two = true}));
  const StepModel model = StepModel::build(std::move(jobs));
  const FitSummary summary = model.fit_summary();
  EXPECT_EQ(summary.counts[static_cast<int>(SizeFit::unmatched)], 1u);
  ASSERT_EQ(summary.largest_unclean.size(), 1u);
  EXPECT_EQ(summary.largest_unclean.front().fit, SizeFit::unmatched);
  EXPECT_THAT(summary.largest_unclean.front().where, HasSubstr("step 2"));
}

TEST(PlanStepModel, FixedBytesAreWhatLivesBeforeTheFirstStep) {
  EXPECT_EQ(toy_model({8, 16}).fixed_bytes(), 4096u + 1000u);
}

TEST(PlanStepModel, SaysWhenABatchSizeIsExtrapolated) {
  const StepModel model = toy_model({8, 16});
  EXPECT_EQ(predict(model, 12, kGiB).extrapolation, "");
  EXPECT_THAT(predict(model, 24, kGiB).extrapolation, HasSubstr("1.5x the largest recorded batch (16)"));
  EXPECT_THAT(predict(model, 24, kGiB).extrapolation, ::testing::Not(HasSubstr("far")));
  EXPECT_THAT(predict(model, 512, kGiB).extrapolation, HasSubstr("far beyond"));
  EXPECT_THAT(predict(model, 2, kGiB).extrapolation, HasSubstr("far below"));
}

TEST(PlanStepModel, ANonStepMarkerInsideAStepEndsIt) {
  // plimsoll train's evaluation comes after "epoch 1 evaluation", inside the last step: not part of the step.
  const Trace trace = parse_trace(
      "a 1 100\n# step 1 begin\na 2 200\n# epoch 1 evaluation\na 3 5000\nf 2\nf 3\n# step 1 end\n", "t");
  const plan::StepSequence sequence = plan::cut_steps(trace, 1);
  ASSERT_EQ(sequence.allocations.size(), 2u);
  EXPECT_EQ(sequence.allocations[1].bytes, 200u);
  ASSERT_EQ(sequence.ops.size(), 3u);  // a 1, a 2, and the free of 2 after the cut
  EXPECT_TRUE(sequence.ops[2].is_free);
}

// ----- largest batch ---------------------------------------------------------------------------------------------

TEST(PlanLargestBatch, TheAnswerFitsAndTheNextDoesNot) {
  const StepModel model = toy_model({8, 16});
  constexpr std::uint64_t kDevice = std::uint64_t{64} << 20;
  const std::vector<PlanAllocator> all = {PlanAllocator::plimsoll, PlanAllocator::pytorch, PlanAllocator::tensorflow};
  const std::vector<LargestBatch> results = largest_batch(model, kDevice, 0, all);
  ASSERT_EQ(results.size(), 3u);
  for (const LargestBatch& result : results) {
    SCOPED_TRACE(std::string(to_string(result.allocator)));
    ASSERT_GT(result.largest_batch, 16u);
    EXPECT_TRUE(predict(model, result.largest_batch, kDevice, {result.allocator}).allocators[0].fits);
    EXPECT_FALSE(predict(model, result.largest_batch + 1, kDevice, {result.allocator}).allocators[0].fits);
    EXPECT_FALSE(result.first_too_large.fits);
    EXPECT_FALSE(result.first_too_large.oom_report.empty());
    ASSERT_TRUE(result.at_largest.has_value());
    EXPECT_EQ(result.headroom_bytes, kDevice - result.at_largest->peak_live_bytes);
  }
  // Peak live grows by 1512 bytes a sample (the activation and the temporary), so about 64 MiB / 1512 fit.
  EXPECT_NEAR(static_cast<double>(results[0].largest_batch), 64.0 * (1 << 20) / 1512, 64.0 * (1 << 20) / 1512 * 0.05);
  // A margin keeps part of the device free: a smaller answer.
  const std::vector<LargestBatch> with_margin = largest_batch(model, kDevice, 0.25, {PlanAllocator::plimsoll});
  EXPECT_LT(with_margin[0].largest_batch, results[0].largest_batch);
}

TEST(PlanLargestBatch, StopsAtTheSearchLimit) {
  const std::vector<LargestBatch> results =
      largest_batch(toy_model({8, 16}), 16 * kGiB, 0, {PlanAllocator::pytorch}, 100);
  EXPECT_EQ(results[0].largest_batch, 100u);
  EXPECT_TRUE(results[0].first_too_large.oom_report.empty());
}

// ----- bad input -------------------------------------------------------------------------------------------------

TEST(PlanBadInput, TracesWithoutSteps) {
  std::vector<RecordedJob> jobs;
  jobs.push_back({.trace = parse_trace("# model toy batch 8\na 1 100\nf 1\n", "nosteps.trace")});
  const std::string error = build_error(std::move(jobs));
  EXPECT_THAT(error, HasSubstr("nosteps.trace has no training steps"));
  EXPECT_THAT(error, HasSubstr("plimsoll::step()"));
}

TEST(PlanBadInput, OneTraceAskedForAnotherBatchSize) {
  std::vector<RecordedJob> jobs;
  jobs.push_back(toy_job(32));
  const StepModel model = StepModel::build(std::move(jobs));
  EXPECT_EQ(predict(model, 32, kGiB).batch, 32u);  // its own batch size: fine
  try {
    predict(model, 64, kGiB);
    FAIL() << "no error";
  } catch (const InvalidArgument& error) {
    EXPECT_THAT(error.what(), HasSubstr("one trace (toy-b32.trace, batch 32) predicts batch 32 only"));
    EXPECT_THAT(error.what(), HasSubstr("--batch-size 16"));
  }
  EXPECT_THROW(largest_batch(model, kGiB, 0, {PlanAllocator::plimsoll}), InvalidArgument);
}

TEST(PlanBadInput, DifferentModelsOrOptimizers) {
  std::vector<RecordedJob> models;
  models.push_back(toy_job(8));
  models.push_back(toy_job(16, {.model = "other"}));
  EXPECT_THAT(build_error(std::move(models)), HasSubstr("recordings of different jobs (model toy against model other"));
  std::vector<RecordedJob> optimizers;
  optimizers.push_back(toy_job(8));
  optimizers.push_back(toy_job(16, {.optimizer = "adam"}));
  const std::string error = build_error(std::move(optimizers));
  EXPECT_THAT(error, HasSubstr("optimizer sgd"));
  EXPECT_THAT(error, HasSubstr("record toy with sgd at another batch size"));
}

TEST(PlanBadInput, UnmarkedTracesOfDifferentShapes) {
  // No markers, batch sizes given: the structure itself must say they are not one job.
  std::vector<RecordedJob> jobs;
  jobs.push_back({.trace = parse_trace(toy_trace(8, {.marker = false}), "a.trace"), .batch = 8});
  std::string other = "a 1 7\n# step 1 begin\n";
  for (int id = 2; id < 40; ++id) other += "a " + std::to_string(id) + " " + std::to_string(id * 100003) + "\n";
  other += "# step 1 end\n# step 2 begin\n# step 2 end\n# step 3 begin\n# step 3 end\n";
  jobs.push_back({.trace = parse_trace(other, "b.trace"), .batch = 16});
  EXPECT_THAT(build_error(std::move(jobs)), HasSubstr("do not look like one job"));
}

TEST(PlanBadInput, NoBatchSizeUnlessGiven) {
  std::vector<RecordedJob> unmarked;
  unmarked.push_back({.trace = parse_trace(toy_trace(8, {.marker = false}), "a.trace")});
  const std::string error = build_error(std::move(unmarked));
  EXPECT_THAT(error, HasSubstr("a.trace: no batch size"));
  EXPECT_THAT(error, HasSubstr("--batch-of a.trace=N"));

  std::vector<RecordedJob> given;
  given.push_back({.trace = parse_trace(toy_trace(8, {.marker = false}), "a.trace"), .batch = 8});
  given.push_back({.trace = parse_trace(toy_trace(16, {.marker = false}), "b.trace"), .batch = 16});
  const StepModel model = StepModel::build(std::move(given));
  EXPECT_EQ(model.job(), "a.trace");
  EXPECT_EQ(model.rebuild(64).peak_live_bytes, parse_trace(toy_trace(64), "x").peak_live_bytes);
}

TEST(PlanBadInput, TheSameBatchSizeTwice) {
  std::vector<RecordedJob> jobs;
  jobs.push_back(toy_job(8));
  jobs.push_back(toy_job(8));
  EXPECT_THAT(build_error(std::move(jobs)), HasSubstr("both ran at batch 8"));
  EXPECT_THAT(build_error({}), HasSubstr("no trace given"));
}

TEST(PlanBadInput, ADeviceSmallerThanTheWeightsAlone) {
  const StepModel model = toy_model({8, 16});
  try {
    predict(model, 8, 4096);
    FAIL() << "no error";
  } catch (const InvalidArgument& error) {
    EXPECT_THAT(error.what(), HasSubstr("smaller than what toy holds before its first step"));
    EXPECT_THAT(error.what(), HasSubstr("4.98 KiB"));
  }
  EXPECT_THROW(largest_batch(model, 4096, 0, {PlanAllocator::plimsoll}), InvalidArgument);
  EXPECT_THROW(largest_batch(model, kGiB, 1.0, {PlanAllocator::plimsoll}), InvalidArgument);
  EXPECT_THROW(model.rebuild(0), InvalidArgument);
}

TEST(PlanBadInput, ARecordingOfTwoDevices) {
  const std::string path = ::testing::TempDir() + "plan_two_devices.plimsoll";
  {
    Config config;
    config.log_device_creation = false;
    Runtime runtime(config);
    Allocator& first = runtime.device("sim:1GiB");
    Allocator& second = runtime.device("sim:2GiB");
    auto recording = Recording::open(path);
    first.record_to(recording);
    second.record_to(recording);
    step();
    first.deallocate(first.allocate(1000));
    second.deallocate(second.allocate(1000));
    step();
    first.record_to(nullptr);
    second.record_to(nullptr);
    recording->close();
  }
  std::vector<RecordedJob> jobs;
  jobs.push_back({.trace = read_trace(path), .batch = 8});
  const std::string error = build_error(std::move(jobs));
  EXPECT_THAT(error, HasSubstr("holds allocations of more than one device (sim:1GiB and sim:2GiB)"));
  EXPECT_THAT(error, HasSubstr("--devices 1"));
}

// ----- names -----------------------------------------------------------------------------------------------------

TEST(PlanNames, JobMarkers) {
  const Trace trace = parse_trace(
      "# warm-up\n# model resnet18 batch 16 input 96x96x3 optimizer sgd framework torch\na 1 8\n", "t");
  const std::optional<JobMarker> marker = find_job_marker(trace);
  ASSERT_TRUE(marker.has_value());
  EXPECT_EQ(marker->model, "resnet18");
  EXPECT_EQ(marker->optimizer, "sgd");
  EXPECT_EQ(marker->batch, 16u);
  EXPECT_FALSE(find_job_marker(parse_trace("a 1 8\n", "t")).has_value());
  EXPECT_FALSE(find_job_marker(parse_trace("# model x batch many\n", "t"))->batch.has_value());
}

TEST(PlanNames, AllocatorsAndDevices) {
  EXPECT_EQ(parse_plan_allocator("pytorch"), PlanAllocator::pytorch);
  EXPECT_EQ(to_string(PlanAllocator::tensorflow), "tensorflow");
  EXPECT_THROW(parse_plan_allocator("jemalloc"), InvalidArgument);
  EXPECT_EQ(plan_device_bytes("sim:16GiB"), 16 * kGiB);
  EXPECT_EQ(plan_device_bytes("16GiB"), 16 * kGiB);
  EXPECT_THROW(plan_device_bytes("lots"), InvalidArgument);
  EXPECT_THROW(plan_device_bytes("0"), InvalidArgument);
  EXPECT_THROW(plan_device_bytes("cuda:x"), InvalidArgument);
}

}  // namespace
}  // namespace plimsoll
