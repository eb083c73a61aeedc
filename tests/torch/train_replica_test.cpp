// The main job's replica (src/train/replica.hpp) on plimsoll devices: data-parallel replicas stay identical, every
// tensor lands on the replica's device under its training tag, an out-of-memory comes back as plimsoll's report
// and leaves nothing behind, and the leak demo's batch feed keeps a batch per step. C++17 (libtorch).
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "devices.hpp"
#include "train_batches.hpp"
#include "plimsoll/torch.hpp"
#include "train/replica.hpp"

namespace {

using plimsoll::train::Replica;
using plimsoll::train::StepResult;
using namespace plimsoll::torch_test;


class TrainReplica : public ::testing::Test {
 protected:
  void SetUp() override {
    plimsoll::torch::install(main_device());
    plimsoll::train::set_compute_threads(1);  // one thread: the same sums in the same order, run after run
  }
};

// Trains two replicas data-parallel for a few steps; returns each one's loss on the same batch afterwards, in
// training mode (batch statistics: equal when the weights are) then in evaluation mode (batch norm's running
// statistics: equal when those were averaged too).
std::vector<StepResult> train_pair(bool average) {
  const Data data = random_samples(64, 7);
  Replica first(main_device(), {});
  Replica second(other_device(), {});
  for (int step = 0; step < 3; ++step) {
    first.forward_backward(data.view(0, 32));
    second.forward_backward(data.view(32, 64));
    if (average) plimsoll::train::average_gradients({&first, &second});
    first.optimizer_step();
    second.optimizer_step();
  }
  // Training mode (batch statistics) on the same samples: equal results exactly when the weights are equal.
  return {first.forward_backward(data.view(0, 64)), second.forward_backward(data.view(0, 64)),
          first.evaluate(data.view(0, 64)), second.evaluate(data.view(0, 64))};
}

TEST_F(TrainReplica, ReplicasThatAverageGradientsStayIdenticalAndOnesThatDoNotDrift) {
  const std::vector<StepResult> averaged = train_pair(true);
  EXPECT_DOUBLE_EQ(averaged[0].loss_sum, averaged[1].loss_sum);
  EXPECT_EQ(averaged[0].correct, averaged[1].correct);
  EXPECT_EQ(averaged[0].samples, 64u);
  const std::vector<StepResult> apart = train_pair(false);
  EXPECT_NE(apart[0].loss_sum, apart[1].loss_sum);  // the check above can fail
}

TEST_F(TrainReplica, AveragingAlsoEqualizesBatchNormStatisticsSoAnyReplicaEvaluatesTheModel) {
  // Each replica's running statistics saw only its half of every batch; averaged with the gradients, they agree.
  const std::vector<StepResult> averaged = train_pair(true);
  EXPECT_DOUBLE_EQ(averaged[2].loss_sum, averaged[3].loss_sum);
  EXPECT_EQ(averaged[2].correct, averaged[3].correct);
  const std::vector<StepResult> apart = train_pair(false);
  EXPECT_NE(apart[2].loss_sum, apart[3].loss_sum);
}

TEST_F(TrainReplica, EveryTensorLandsOnTheReplicasDeviceUnderItsTrainingTag) {
  const Usage main_before = usage(main_device());
  const Data data = random_samples(16, 1);
  {
    Replica replica(other_device(), {});
    const std::uint64_t weights = tag_in_use(other_device(), "weights");
    EXPECT_GT(weights, 800u << 10);  // 207k parameters of 4 bytes
    replica.forward_backward(data.view(0, 16));
    replica.optimizer_step();
    const std::uint64_t gradients = tag_in_use(other_device(), "gradients");
    EXPECT_GT(gradients, 0u);
    EXPECT_EQ(tag_in_use(other_device(), "optimizer_state"), 2 * gradients);  // Adam's two moments
    EXPECT_EQ(tag_in_use(other_device(), "activations"), 0u);                 // freed by the end of the step
    EXPECT_EQ(tag_in_use(other_device(), "batches"), 0u);
    // In-use bytes are rounded up to 256 per allocation: one gradient per parameter tensor (10 of them).
    EXPECT_GE(gradients, replica.parameters() * sizeof(float));
    EXPECT_LT(gradients, replica.parameters() * sizeof(float) + 10 * 256);
  }
  EXPECT_EQ(usage(other_device()).in_use_bytes, 0u);
  EXPECT_EQ(usage(main_device()).in_use_bytes, main_before.in_use_bytes);  // nothing went to the default device
}

TEST_F(TrainReplica, OutOfMemoryIsPlimsollsReportAndLeavesNothingBehind) {
  Replica replica(small_device(), {});  // 8 MiB: the weights fit, a 128-sample step's activations do not
  const Usage before = usage(small_device());
  const Data data = random_samples(128, 2);
  try {
    replica.forward_backward(data.view(0, 128));
    FAIL() << "a 128-sample step fit in 8 MiB";
  } catch (const plimsoll::train::TrainingOutOfMemory& oom) {
    const std::string report = oom.what();
    EXPECT_NE(report.find("out of memory on cpu/2"), std::string::npos) << report;
    EXPECT_NE(report.find("suggestion:"), std::string::npos) << report;
    EXPECT_EQ(report.find("Exception raised from"), std::string::npos) << "libtorch's backtrace: " << report;
  }
  const Usage after = usage(small_device());
  EXPECT_EQ(after.in_use_bytes, before.in_use_bytes);
  EXPECT_EQ(after.live_allocations, before.live_allocations);
  EXPECT_EQ(after.ooms, before.ooms + 1);
  // The replica still works with a batch that fits.
  EXPECT_EQ(replica.forward_backward(data.view(0, 4)).samples, 4u);
}

TEST_F(TrainReplica, LeakDemoKeepsOneBatchOfImagesPerStep) {
  const Data data = random_samples(32, 3);
  Replica replica(other_device(), {});
  replica.keep_every_batch(true);
  for (int step = 1; step <= 3; ++step) {
    replica.forward_backward(data.view(0, 32));
    EXPECT_EQ(tag_in_use(other_device(), "batches"), static_cast<std::uint64_t>(step) * 32 * kPixels * sizeof(float));
  }
  // Evaluation batches never stay.
  replica.evaluate(data.view(0, 32));
  EXPECT_EQ(tag_in_use(other_device(), "batches"), 3u * 32 * kPixels * sizeof(float));
}

}  // namespace
