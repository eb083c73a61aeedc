#pragma once
// Model parallelism (`plimsoll train --model-parallel 2`): the network split into two stages, each on its own
// plimsoll device, with micro-batches pipelined between them so both stages compute at once
// (pipeline_schedule.hpp). Like replica.hpp, this header includes no libtorch header (C++17 and C++20).
//
// Stage 0 (the first conv block) and stage 1 (the second conv block and the linear layers) each keep their weights, gradients, optimizer state
// and activations on their own device, under the tags of plimsoll::torch::tags. What crosses between them is
// copied: a micro-batch's features onto stage 1's device (its activations), and the gradient of those features
// back onto stage 0's (its gradients). Images go to stage 0's device, labels to stage 1's (batches).
#include <cstddef>
#include <memory>
#include <vector>

#include "train/replica.hpp"

namespace plimsoll {
class Allocator;
}

namespace plimsoll::train {

class StagedReplica {
 public:
  static constexpr std::size_t kStages = 2;

  /// Builds stage s's weights on stage_devices[s] (kStages of them), with the initial weights a Replica with the
  /// same seed has. Every step splits its batch into `micro_batches` (at most one per sample). Each stage's
  /// thread gets `compute_threads` of libtorch's threads. Throws InvalidArgument for a wrong number of devices,
  /// TrainingOutOfMemory when the weights do not fit.
  StagedReplica(const std::vector<Allocator*>& stage_devices, const ReplicaOptions& options,
                std::size_t micro_batches, int compute_threads);
  ~StagedReplica();
  StagedReplica(const StagedReplica&) = delete;
  StagedReplica& operator=(const StagedReplica&) = delete;

  /// One training step: forward and backward of every micro-batch through the pipeline (stage 1 on a thread of
  /// its own), the gradients summed over the micro-batches as if the batch had gone through whole, then each
  /// stage's Adam step on its device. Batch norm (stage 0) sees one micro-batch at a time, so its batch
  /// statistics are the micro-batch's, as in GPipe; with one micro-batch the step is the single-device one.
  /// An out-of-memory on either device stops both stages and is thrown here as TrainingOutOfMemory.
  StepResult train_step(const BatchView& batch);
  /// Forward only, in evaluation mode, through both stages in turn on the calling thread.
  StepResult evaluate(const BatchView& batch);

  /// The leak demo: stage 0's batch feed keeps every batch of images it hands out (Replica::keep_every_batch).
  void keep_every_batch(bool keep);
  std::uint64_t parameters() const;
  std::size_t micro_batches() const noexcept;
  /// Seconds each stage spent computing over the run (stage 0's forward and backward passes, stage 1's steps on
  /// its thread), optimizer steps not included: against the steps' wall time, they show the stages overlapping.
  std::vector<double> stage_busy_seconds() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace plimsoll::train
