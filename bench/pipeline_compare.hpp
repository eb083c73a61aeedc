#pragma once
// What the C++ contenders of bench/run_pipeline_compare.sh share: the options, the per-sample decode and
// augmentation (the same code runs inside plimsoll::Pipeline and inside libtorch's data loader, so the two differ
// only in the loader), the consumer that touches each batch, and the timing and JSON line each run prints. The
// Python contender, bench/pipeline_vs_dataloader.py, does the same with numpy and prints the same fields.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "plimsoll/datasets.hpp"

namespace plimsoll::bench::compare {

inline constexpr float kMean = 0.2860F;  // Fashion-MNIST's train-set pixel mean and standard deviation
inline constexpr float kStddev = 0.3530F;
inline constexpr std::size_t kRows = 28;
inline constexpr std::size_t kCols = 28;
inline constexpr std::size_t kPixels = kRows * kCols;

struct Options {
  std::string data_dir;
  std::size_t batch_size = 256;
  std::size_t workers = 4;
  std::size_t prefetch = 2;       ///< Batches in flight per worker: PyTorch's prefetch_factor.
  std::uint64_t epochs = 3;       ///< Timed epochs, after one warm-up epoch.
  double step_us = 0;             ///< The consumer's own work per batch, spun, on top of summing the batch.
  std::uint64_t seed = 1;
  int torch_threads = 0;          ///< libtorch only: torch::set_num_threads; 0 leaves libtorch's default.
};

inline void add_options(CLI::App& app, Options& options) {
  options.data_dir = plimsoll::default_fashion_mnist_dir().string();
  app.add_option("--data-dir", options.data_dir, "Fashion-MNIST IDX files (Debian package dataset-fashion-mnist)")
      ->capture_default_str();
  app.add_option("--batch-size", options.batch_size, "samples per batch")->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--workers", options.workers, "worker threads")->check(CLI::Range(1, 256))->capture_default_str();
  app.add_option("--prefetch", options.prefetch, "batches in flight per worker (PyTorch's prefetch_factor)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--epochs", options.epochs, "timed epochs, after one warm-up epoch")->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--step-us", options.step_us, "the consumer spins this long per batch after summing it")
      ->check(CLI::Range(0.0, 1e7))
      ->capture_default_str();
  app.add_option("--seed", options.seed, "seed of the shuffle and the augmentation")->capture_default_str();
}

/// One sample, as every contender makes it: image `index` of the train split (uint8, 28 x 28), shifted by up to 4
/// pixels each way with zero fill (pad 4 + random crop) and flipped left to right with probability 1/2, as
/// choose_augmentation(seed) says; then (x / 255 - mean) / stddev into `pixels` (float32); the label as int64.
inline std::int64_t decode_augment(const plimsoll::ImageDataset& data, std::uint64_t index, std::uint64_t seed,
                                   std::span<std::uint8_t> scratch, std::span<float> pixels) {
  plimsoll::augment_sample(data.image(index), scratch, data.shape(), seed, {.flip = true, .max_shift = 4});
  plimsoll::normalize(scratch, pixels, kMean, kStddev);
  return static_cast<std::int64_t>(data.label(index));
}

/// The training loop's stand-in: reads every value of the batch (so a loader cannot hand over pages it never
/// wrote), then spins step_us.
class Consumer {
 public:
  using Clock = std::chrono::steady_clock;
  explicit Consumer(double step_us) : step_(std::chrono::duration_cast<Clock::duration>(
                                          std::chrono::duration<double, std::micro>(step_us))) {}

  void consume(std::span<const float> pixels, std::span<const std::int64_t> labels) {
    const auto begin = Clock::now();
    double sum = 0;
    for (const float value : pixels) sum += static_cast<double>(value);
    std::int64_t label_sum = 0;
    for (const std::int64_t label : labels) label_sum += label;
    pixel_sum_ += sum;
    label_sum_ += label_sum;
    pixels_ += pixels.size();
    labels_ += labels.size();
    if (step_.count() > 0) {
      while (Clock::now() - begin < step_) {
      }
    }
  }

  double mean_pixel() const { return pixels_ == 0 ? 0 : pixel_sum_ / static_cast<double>(pixels_); }
  double mean_label() const {
    return labels_ == 0 ? 0 : static_cast<double>(label_sum_) / static_cast<double>(labels_);
  }

 private:
  Clock::duration step_;
  double pixel_sum_ = 0;
  std::int64_t label_sum_ = 0;
  std::uint64_t pixels_ = 0;
  std::uint64_t labels_ = 0;
};

/// Times the epochs after the warm-up one: from the end of the consumer's step on the warm-up epoch's last batch to
/// the end of its step on the last batch, so every epoch boundary after the warm-up (a loader's reset and refill)
/// is inside the time. Each wait is the time from asking for a batch to holding it.
class RunTimer {
 public:
  using Clock = std::chrono::steady_clock;

  /// A batch of `epoch` (0: the warm-up) arrived: asked at `asked`, held at `got`.
  void batch(std::uint64_t epoch, Clock::time_point asked, Clock::time_point got, std::size_t samples) {
    if (epoch == 0) return;
    if (!timing_) {
      timing_ = true;
      start_ = last_consumed_;
    }
    waits_ns_.push_back(std::chrono::duration<double, std::nano>(got - asked).count());
    samples_ += samples;
  }
  /// The consumer finished the batch it holds.
  void consumed(Clock::time_point now) {
    last_consumed_ = now;
    if (timing_) end_ = now;
  }

  /// The JSON fields every contender reports.
  nlohmann::json report(const Options& options, const Consumer& consumer, double load_s) const {
    std::vector<double> waits = waits_ns_;
    std::sort(waits.begin(), waits.end());
    const auto quantile_us = [&](double q) {
      if (waits.empty()) return 0.0;
      return waits[static_cast<std::size_t>(q * static_cast<double>(waits.size() - 1))] / 1000.0;
    };
    double wait_total_ns = 0;
    for (const double wait : waits) wait_total_ns += wait;
    const double seconds = std::chrono::duration<double>(end_ - start_).count();
    return {
        {"batch_size", options.batch_size},
        {"workers", options.workers},
        {"prefetch", options.prefetch},
        {"timed_epochs", options.epochs},
        {"step_us", options.step_us},
        {"samples", samples_},
        {"batches", waits.size()},
        {"seconds", seconds},
        {"samples_per_s", seconds > 0 ? static_cast<double>(samples_) / seconds : 0.0},
        {"wait_p50_us", quantile_us(0.50)},
        {"wait_p99_us", quantile_us(0.99)},
        {"wait_total_s", wait_total_ns / 1e9},
        {"mean_pixel", consumer.mean_pixel()},
        {"mean_label", consumer.mean_label()},
        {"load_s", load_s},
    };
  }

 private:
  bool timing_ = false;
  Clock::time_point start_{};
  Clock::time_point end_{};
  Clock::time_point last_consumed_{};
  std::vector<double> waits_ns_;
  std::uint64_t samples_ = 0;
};

}  // namespace plimsoll::bench::compare
