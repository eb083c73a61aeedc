#pragma once
// One copy of the model being trained, with its optimizer, on one plimsoll device. The C++20 job (train_job.cpp)
// reaches libtorch only through this header, which includes no libtorch header and compiles as C++17 and C++20
// (libtorch 1.13's headers do not compile as C++20 under Clang 14).
//
// Every tensor a replica makes comes from its device (a DeviceScope around each call) under one of the tags of
// plimsoll::torch::tags: weights at construction, batches for the copied-in batch, activations for the forward
// pass, gradients for backward, optimizer_state for the optimizer's step.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "plimsoll/error.hpp"

namespace plimsoll {
class Allocator;
}

namespace plimsoll::train {

struct ReplicaTensors;

/// A batch of normalized 1x28x28 float images and their int64 labels, in memory the caller owns (a pipeline batch,
/// or part of one). The replica copies it onto its device: the pipeline's buffer goes back to the pipeline at once.
struct BatchView {
  const float* images = nullptr;
  const std::int64_t* labels = nullptr;
  std::size_t samples = 0;
};

struct StepResult {
  double loss_sum = 0;      // summed over the samples (mean * samples), so replicas' results add up
  std::size_t correct = 0;  // samples whose highest logit is the label
  std::size_t samples = 0;
};

StepResult& operator+=(StepResult& total, const StepResult& part);

struct ReplicaOptions {
  std::uint64_t seed = 0;  // of the initial weights: replicas with the same seed start identical
  double learning_rate = 1e-3;
  std::int64_t classes = 10;
};

/// The device ran out of memory inside libtorch. what() is plimsoll's out-of-memory report (oom.hpp), as the
/// device wrote it, without libtorch's C++ backtrace.
class TrainingOutOfMemory : public Error {
 public:
  using Error::Error;
};

class Replica {
 public:
  /// Builds the weights on `device`. Throws TrainingOutOfMemory when they do not fit.
  Replica(Allocator& device, const ReplicaOptions& options);
  ~Replica();
  Replica(const Replica&) = delete;
  Replica& operator=(const Replica&) = delete;

  /// Clears the gradients, copies `batch` in, runs forward and backward. The gradients stay in the parameters for
  /// average_gradients and optimizer_step. Safe to call on different replicas from different threads at once.
  StepResult forward_backward(const BatchView& batch);
  /// One Adam step with the gradients in the parameters (optimizer state appears on the first).
  void optimizer_step();
  /// Forward only, in evaluation mode (batch norm's running statistics), no gradients kept.
  StepResult evaluate(const BatchView& batch);

  /// The leak demo (`plimsoll train --leak-demo`): from now on the replica's batch feed keeps a reference to every
  /// batch it hands out, as the data generator of the Keras report did, so memory grows by a batch per step.
  void keep_every_batch(bool keep);

  Allocator& device() const noexcept;
  std::uint64_t parameters() const;

  struct Impl;

 private:
  friend void average_gradients(const std::vector<Replica*>& replicas);
  friend struct ReplicaTensors;
  std::unique_ptr<Impl> impl_;
};

/// Data parallelism: sets every replica's gradients and batch-norm running statistics to their mean over the
/// replicas, tensor by tensor, in place (each copy stays on its own device and nothing is allocated).
void average_gradients(const std::vector<Replica*>& replicas);

/// libtorch's intra-op threads for the calling thread (at::set_num_threads). Each replica thread of a data-parallel
/// run calls it, since OpenMP keeps the setting per thread.
void set_compute_threads(int threads);

}  // namespace plimsoll::train
