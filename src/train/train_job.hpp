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
#include "telemetry/leak_watch.hpp"

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
};

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
  std::uint64_t peak_in_use_bytes() const;    // summed over devices
  std::uint64_t peak_reserved_bytes() const;  // summed over devices
};


/// Runs the job. Throws InvalidArgument for bad options or a missing dataset (the message names the fix), and
/// TrainingOutOfMemory (replica.hpp) when a device runs out.
TrainReport run_training(const TrainOptions& options);

}  // namespace plimsoll::train
