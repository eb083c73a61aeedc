#pragma once
// libtorch's C++ data loader behind an interface that needs no libtorch header: libtorch 1.13's headers do not
// compile as C++20 with Clang 14 and libstdc++ 12 (std::vector of the incomplete c10::IValue, whose destructor C++20
// makes constexpr), so libtorch_loader.cpp is compiled as C++17 and the C++20 side
// (pipeline_compare_libtorch.cpp, which uses plimsoll's headers) reaches it only through this header.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace plimsoll::bench::compare {

/// Writes sample `index` of epoch `epoch`: rows x cols float32 pixels into `pixels`; returns its label.
using MakeSample = std::function<std::int64_t(std::uint64_t epoch, std::uint64_t index, float* pixels)>;

struct TorchLoaderOptions {
  std::size_t dataset_size = 0;
  std::size_t rows = 0;
  std::size_t cols = 0;
  std::size_t batch_size = 1;
  std::size_t workers = 1;
  std::size_t max_jobs = 2;  ///< Batches requested from the workers and not yet handed over.
  std::uint64_t seed = 0;    ///< torch::manual_seed: RandomSampler's permutations.
  int threads = 0;           ///< torch::set_num_threads; 0 leaves libtorch's default.
};

/// One collated batch as the training loop sees it, with when it was asked for and when it arrived.
struct TorchBatchView {
  std::chrono::steady_clock::time_point asked;
  std::chrono::steady_clock::time_point got;
  const float* pixels = nullptr;        ///< samples x 1 x rows x cols, contiguous
  const std::int64_t* labels = nullptr;  ///< samples
  std::size_t samples = 0;
};

class TorchLoader {
 public:
  /// A map-style dataset whose get(i) calls make_sample into a fresh tensor, a RandomSampler, Stack collation,
  /// `workers` worker threads, ordered delivery.
  TorchLoader(const TorchLoaderOptions& options, MakeSample make_sample);
  ~TorchLoader();
  TorchLoader(const TorchLoader&) = delete;
  TorchLoader& operator=(const TorchLoader&) = delete;

  /// One epoch: every batch is handed to `on_batch`, and stays valid until it returns.
  void run_epoch(std::uint64_t epoch, const std::function<void(const TorchBatchView&)>& on_batch);

  int threads() const;
  static std::string version();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace plimsoll::bench::compare
