// plimsoll_libtorch_loader_bench: Fashion-MNIST through libtorch's C++ data loader (torch::data::make_data_loader,
// RandomSampler, Stack collation, worker threads; libtorch_loader.cpp), with the same decode and augmentation code
// as plimsoll_pipeline_compare_bench (pipeline_compare.hpp); prints one JSON line with the same fields. Built only
// when CMake finds libtorch (Debian libtorch-dev); bench/run_pipeline_compare.sh runs it.
#include <array>
#include <chrono>
#include <cstdint>
#include <exception>
#include <iostream>
#include <span>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "libtorch_loader.hpp"
#include "pipeline_compare.hpp"
#include "plimsoll/datasets.hpp"
#include "plimsoll/pipeline.hpp"

namespace {

namespace compare = plimsoll::bench::compare;
using Clock = std::chrono::steady_clock;

int run(const compare::Options& options) {
  const auto load_begin = Clock::now();
  const plimsoll::ImageDataset data = plimsoll::load_fashion_mnist(options.data_dir, plimsoll::Split::train);
  const double load_s = std::chrono::duration<double>(Clock::now() - load_begin).count();

  compare::TorchLoaderOptions loader_options;
  loader_options.dataset_size = data.size();
  loader_options.rows = compare::kRows;
  loader_options.cols = compare::kCols;
  loader_options.batch_size = options.batch_size;
  loader_options.workers = options.workers;
  // max_jobs: batches requested from the workers and not yet handed to the training loop, PyTorch's
  // num_workers x prefetch_factor. Delivery is in order (enforce_ordering, the default), as in the others.
  loader_options.max_jobs = options.workers * options.prefetch;
  loader_options.seed = options.seed;
  loader_options.threads = options.torch_threads;
  // The seed of a sample is plimsoll's sample_seed(seed, epoch, index), as inside plimsoll::Pipeline, so both C++
  // contenders make exactly the same samples.
  const std::uint64_t seed = options.seed;
  compare::TorchLoader loader(loader_options, [&data, seed](std::uint64_t epoch, std::uint64_t index, float* pixels) {
    std::array<std::uint8_t, compare::kPixels> scratch{};
    return compare::decode_augment(data, index, plimsoll::sample_seed(seed, epoch, index), scratch,
                                   std::span<float>(pixels, compare::kPixels));
  });

  compare::Consumer consumer(options.step_us);
  compare::RunTimer timer;
  for (std::uint64_t epoch = 0; epoch <= options.epochs; ++epoch) {
    loader.run_epoch(epoch, [&](const compare::TorchBatchView& batch) {
      timer.batch(epoch, batch.asked, batch.got, batch.samples);
      consumer.consume(std::span<const float>(batch.pixels, batch.samples * compare::kPixels),
                       std::span<const std::int64_t>(batch.labels, batch.samples));
      timer.consumed(Clock::now());
    });
  }

  nlohmann::json line = timer.report(options, consumer, load_s);
  line["loader"] = "libtorch";
  line["in_flight"] = loader_options.max_jobs;
  line["torch_threads"] = loader.threads();
  line["torch_version"] = compare::TorchLoader::version();
  std::cout << line.dump() << '\n';
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  compare::Options options;
  CLI::App app{"Fashion-MNIST through libtorch's data loader; prints one JSON line of throughput and batch waits."};
  compare::add_options(app, options);
  app.add_option("--torch-threads", options.torch_threads, "torch::set_num_threads; 0: libtorch's default")
      ->check(CLI::Range(0, 1024));
  CLI11_PARSE(app, argc, argv);
  try {
    return run(options);
  } catch (const std::exception& error) {
    std::cerr << "plimsoll_libtorch_loader_bench: " << error.what() << '\n';
    return 1;
  }
}
