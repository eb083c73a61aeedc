#pragma once
// The main job, `plimsoll train`: a convolutional network trained on Fashion-MNIST with libtorch on the CPU, every
// tensor in a plimsoll device, batches from plimsoll::Pipeline, the run recorded and read back by the leak watch.
// C++20 (src/cli/train_command.cpp prints what run_training returns); libtorch is reached through replica.hpp.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "plimsoll/pipeline.hpp"
#include "plimsoll/policy.hpp"
#include "plimsoll/stats.hpp"
#include "plimsoll/trace.hpp"
#include "telemetry/leaks/leak_watch.hpp"
#include "train/process_group.hpp"
#include "train/rank_report.hpp"

namespace plimsoll::train {

struct TrainOptions {
  std::filesystem::path data_dir;  // Fashion-MNIST's IDX files (default_fashion_mnist_dir())
  std::uint64_t epochs = 2;
  std::uint64_t limit_batches = 0;  // training batches per epoch; 0: all of them
  std::size_t batch_size = 128;
  double learning_rate = 1e-3;
  std::uint64_t seed = 2026;
  std::string device = "cpu";  // the host device to train on; split into `devices` logical devices when > 1
  std::size_t devices = 1;     // data-parallel replicas, one per logical device
  std::optional<Growth> growth;                // --policy
  std::optional<std::uint64_t> memory_limit;  // --memory-limit: per device (per logical device when split)
  std::size_t threads = 0;                     // libtorch's compute threads in all; 0: one per replica
  std::size_t loader_workers = 1;
  std::string record_path;  // keep the trace here; empty: a temporary file, deleted after the leak watch read it
  std::string html_path;    // the memory timeline
  bool leak_demo = false;
  bool progress = true;  // progress on stderr: a bar on a terminal, a line per quarter epoch otherwise
  /// One rank of a data-parallel job over processes (`--nproc`, or RANK/WORLD_SIZE/MASTER_*): each rank trains one
  /// replica on its share of every batch and the ranks average gradients and batch-norm statistics every step.
  std::optional<ProcessGroupOptions> distributed;
  bool verify_replicas = false;  // after every step, check that all ranks hold bitwise-equal weights
  /// Model parallelism (`--model-parallel`): 2 splits the network into two stages on the logical devices
  /// DEVICE/0 and DEVICE/1, pipelined over `micro_batches` micro-batches per step (0: kDefaultMicroBatches).
  std::size_t model_parallel = 1;
  std::size_t micro_batches = 0;
};

/// Micro-batches per step of a model-parallel run: with 2 stages, the pipeline's fill and drain then idle each
/// stage for 1 micro-batch in 5, and a micro-batch of the default batch (32 samples) still keeps libtorch's kernels
/// busy.
inline constexpr std::size_t kDefaultMicroBatches = 4;

/// A device as it stood after the last step (the replicas' weights and optimizer state still live).
struct DeviceReport {
  std::string name;
  std::uint64_t limit_bytes = 0;
  Stats stats;
};

struct EpochReport {
  std::uint64_t epoch = 0;  // from 1
  std::uint64_t steps = 0;
  double train_loss = 0;  // mean over the epoch's samples
  double train_accuracy = 0;
  double test_loss = 0;
  double test_accuracy = 0;
  double seconds = 0;
};

struct TrainReport {
  std::vector<EpochReport> epochs;
  std::vector<DeviceReport> devices;
  std::uint64_t parameters = 0;
  std::uint64_t steps = 0;
  double seconds = 0;                   // training and evaluation, not the leak watch
  double test_accuracy = 0;             // after the last epoch
  PipelineMetrics loader;               // the last epoch's training pipeline
  Trace trace;                          // what the recording read back (names the leak watch's call sites)
  telemetry::LeakReport leaks;
  std::string allocator_warning;        // plimsoll::torch::allocator_report_line() at the end: another CPU
                                        // allocator replaced plimsoll's during the run ("" when none did)
  std::string trace_path;               // empty when the trace was temporary
  std::string html_path;
  int rank = 0;
  int world_size = 1;
  std::vector<RankReport> ranks;        // on rank 0 of a multi-process job: every rank, in rank order
  std::uint64_t replica_checks = 0;     // --verify-replicas: steps checked
  double step_seconds = 0;              // in training steps, over the run
  double all_reduce_seconds = 0;        // of which in the gradient all-reduce (multi-process jobs)
  std::size_t model_parallel = 1;       // stages (--model-parallel)
  std::size_t micro_batches = 0;        // per step, when model_parallel > 1
  std::vector<double> stage_busy_seconds;  // per stage: computing, over the run (model parallel only)
  std::uint64_t peak_in_use_bytes() const;    // summed over devices
  std::uint64_t peak_reserved_bytes() const;  // summed over devices
};


/// Checks the options alone, before anything is loaded or started (the launcher calls it before it starts any
/// rank). Throws InvalidArgument naming the option and the fix.
void validate(const TrainOptions& options);

/// Runs the job. Throws InvalidArgument for bad options or a missing dataset (the message names the fix),
/// TrainingOutOfMemory (replica.hpp) when a device runs out, and RankLost when another rank of a multi-process job
/// failed or vanished.
TrainReport run_training(const TrainOptions& options);

}  // namespace plimsoll::train
