// Model parallelism (src/train/staged_replica.hpp) on plimsoll devices: with one micro-batch the two-stage pipeline
// trains exactly as the single-device Replica does; each stage's weights, gradients, optimizer state, activations
// and batches stay on its own device; an out-of-memory on the second stage's thread stops both stages, comes back
// as plimsoll's report and leaves nothing behind. C++17 (libtorch). Label train.
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "devices.hpp"
#include "train_batches.hpp"
#include "plimsoll/error.hpp"
#include "plimsoll/torch.hpp"
#include "train/replica.hpp"
#include "train/staged_replica.hpp"

namespace {

using plimsoll::train::BatchView;
using plimsoll::train::Replica;
using plimsoll::train::StagedReplica;
using plimsoll::train::StepResult;
using namespace plimsoll::torch_test;

// FashionCnn's parameters by stage (src/train/model.hpp): the first conv block; the second and the linear layers.
constexpr std::uint64_t kFirstStageParameters = 16 * 9 + 2 * 16;
constexpr std::uint64_t kSecondStageParameters = 32 * 16 * 9 + 2 * 32 + 1568 * 128 + 128 + 128 * 10 + 10;

class TrainStagedReplica : public ::testing::Test {
 protected:
  void SetUp() override {
    plimsoll::torch::install(main_device());
    plimsoll::train::set_compute_threads(1);  // one thread per stage: the same sums in the same order
  }
};

TEST_F(TrainStagedReplica, OneMicroBatchTrainsExactlyAsTheSingleDeviceReplica) {
  const Data data = random_samples(96, 11);
  plimsoll::train::ReplicaOptions options;
  options.seed = 5;
  Replica whole(main_device(), options);
  StagedReplica staged({&other_device(), &small_device()}, options, 1, 1);
  EXPECT_EQ(staged.parameters(), whole.parameters());
  EXPECT_EQ(staged.parameters(), kFirstStageParameters + kSecondStageParameters);
  for (std::size_t step = 0; step < 3; ++step) {
    const BatchView batch = data.view(32 * step, 32 * (step + 1));
    const StepResult expected = whole.forward_backward(batch);
    whole.optimizer_step();
    const StepResult got = staged.train_step(batch);
    EXPECT_DOUBLE_EQ(got.loss_sum, expected.loss_sum) << "step " << step;
    EXPECT_EQ(got.correct, expected.correct) << "step " << step;
    EXPECT_EQ(got.samples, expected.samples);
  }
  // Same weights and batch-norm statistics after the steps: the same evaluation.
  const StepResult expected = whole.evaluate(data.view(0, 32));
  const StepResult got = staged.evaluate(data.view(0, 32));
  EXPECT_DOUBLE_EQ(got.loss_sum, expected.loss_sum);
  EXPECT_EQ(got.correct, expected.correct);
}

TEST_F(TrainStagedReplica, MicroBatchesCoverTheWholeBatchOnce) {
  const Data data = random_samples(30, 12);
  StagedReplica staged({&other_device(), &small_device()}, {}, 4, 1);
  EXPECT_EQ(staged.micro_batches(), 4u);
  const StepResult result = staged.train_step(data.view(0, 30));  // shares of 7 and 8 samples
  EXPECT_EQ(result.samples, 30u);
  EXPECT_GT(result.loss_sum, 0.0);
  // More micro-batches than samples: one sample each.
  EXPECT_EQ(staged.train_step(data.view(0, 3)).samples, 3u);
  const std::vector<double> busy = staged.stage_busy_seconds();
  ASSERT_EQ(busy.size(), 2u);
  EXPECT_GT(busy[0], 0.0);
  EXPECT_GT(busy[1], 0.0);
}

TEST_F(TrainStagedReplica, EachStageKeepsItsTensorsOnItsOwnDeviceUnderItsTrainingTag) {
  const Usage main_before = usage(main_device());
  const Data data = random_samples(32, 13);
  {
    StagedReplica staged({&other_device(), &small_device()}, {}, 4, 1);
    // In-use bytes are rounded up to 256 per allocation; stage 0's weights include batch norm's running statistics.
    EXPECT_GE(tag_in_use(other_device(), "weights"), kFirstStageParameters * sizeof(float));
    EXPECT_LT(tag_in_use(other_device(), "weights"), 4u << 10);
    EXPECT_GE(tag_in_use(small_device(), "weights"), kSecondStageParameters * sizeof(float));
    EXPECT_LT(tag_in_use(small_device(), "weights"), kSecondStageParameters * sizeof(float) + 12 * 256);
    staged.train_step(data.view(0, 32));
    for (plimsoll::Allocator* device : {&other_device(), &small_device()}) {
      const std::uint64_t gradients = tag_in_use(*device, "gradients");
      EXPECT_GT(gradients, 0u);
      EXPECT_EQ(tag_in_use(*device, "optimizer_state"), 2 * gradients);  // Adam's two moments, on the same device
      EXPECT_EQ(tag_in_use(*device, "activations"), 0u);                 // freed by the end of the step
      EXPECT_EQ(tag_in_use(*device, "batches"), 0u);
    }
    EXPECT_GE(tag_in_use(other_device(), "gradients"), kFirstStageParameters * sizeof(float));
    EXPECT_GE(tag_in_use(small_device(), "gradients"), kSecondStageParameters * sizeof(float));
    staged.evaluate(data.view(0, 32));
    EXPECT_EQ(tag_in_use(other_device(), "activations"), 0u);
    EXPECT_EQ(tag_in_use(small_device(), "activations"), 0u);
  }
  EXPECT_EQ(usage(other_device()).in_use_bytes, 0u);
  EXPECT_EQ(usage(small_device()).in_use_bytes, 0u);
  EXPECT_EQ(usage(main_device()).in_use_bytes, main_before.in_use_bytes);  // nothing went to the default device
}

// The second stage runs on its own thread: its out-of-memory must stop the first stage too, come back to the
// caller as plimsoll's report, and free both stages' in-flight tensors.
TEST_F(TrainStagedReplica, OutOfMemoryOnTheSecondStageStopsBothStagesAndLeavesNothingBehind) {
  // Stage 1 on 8 MiB: its weights fit, a 512-sample micro-batch's input (6 MiB) and its gradient do not.
  StagedReplica staged({&other_device(), &small_device()}, {}, 2, 1);
  const Data data = random_samples(1024, 14);
  // A step that fits first, so that both stages hold what they hold between steps (gradients, Adam's moments): an
  // out-of-memory in the middle of backward leaves the gradients made so far in their parameters, as between steps.
  staged.train_step(data.view(0, 16));
  const Usage first_before = usage(other_device()), second_before = usage(small_device());
  try {
    staged.train_step(data.view(0, 1024));
    FAIL() << "a 512-sample micro-batch fit stage 1's 8 MiB";
  } catch (const plimsoll::train::TrainingOutOfMemory& oom) {
    const std::string report = oom.what();
    EXPECT_NE(report.find("out of memory on cpu/2"), std::string::npos) << report;
    EXPECT_EQ(report.find("Exception raised from"), std::string::npos) << "libtorch's backtrace: " << report;
  }
  const Usage first_after = usage(other_device()), second_after = usage(small_device());
  EXPECT_EQ(first_after.in_use_bytes, first_before.in_use_bytes);
  EXPECT_EQ(first_after.live_allocations, first_before.live_allocations);
  EXPECT_EQ(second_after.in_use_bytes, second_before.in_use_bytes);
  EXPECT_EQ(second_after.live_allocations, second_before.live_allocations);
  EXPECT_EQ(second_after.ooms, second_before.ooms + 1);
  // Both stages still work with a batch that fits.
  EXPECT_EQ(staged.train_step(data.view(0, 16)).samples, 16u);
}

TEST_F(TrainStagedReplica, LeakDemoKeepsOneBatchOfImagesPerStepOnTheFirstStage) {
  const Data data = random_samples(32, 15);
  StagedReplica staged({&other_device(), &small_device()}, {}, 2, 1);
  staged.keep_every_batch(true);
  for (int step = 1; step <= 3; ++step) {
    staged.train_step(data.view(0, 32));
    EXPECT_EQ(tag_in_use(other_device(), "batches"), static_cast<std::uint64_t>(step) * 32 * kPixels * sizeof(float));
    EXPECT_EQ(tag_in_use(small_device(), "batches"), 0u);
  }
}

TEST_F(TrainStagedReplica, NeedsOneDevicePerStage) {
  EXPECT_THROW(StagedReplica({&other_device()}, {}, 4, 1), plimsoll::InvalidArgument);
  EXPECT_THROW(StagedReplica({&other_device(), &small_device()}, {}, 0, 1), plimsoll::InvalidArgument);
}

}  // namespace
