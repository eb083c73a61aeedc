// plimsoll_pipeline_compare_bench: Fashion-MNIST through plimsoll::Pipeline (shuffled, flipped, shifted,
// normalized, batched), one warm-up epoch then timed epochs; prints one JSON line. bench/run_pipeline_compare.sh
// runs it beside libtorch's data loader (pipeline_compare_libtorch.cpp) and PyTorch's DataLoader
// (pipeline_vs_dataloader.py), each in its own process, and measures each process tree's memory from outside.
#include <chrono>
#include <cstdint>
#include <cstring>
#include <exception>
#include <iostream>
#include <optional>
#include <span>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

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

  plimsoll::PipelineOptions pipeline_options;
  pipeline_options.dataset_size = data.size();
  pipeline_options.batch_size = options.batch_size;
  pipeline_options.sample_fields = {compare::kPixels * sizeof(float), sizeof(std::int64_t)};
  pipeline_options.workers = options.workers;
  // PyTorch keeps workers x prefetch_factor batches in flight (being built or queued) besides the one the training
  // loop holds; max_batches counts all of them, so the same depth is one more.
  pipeline_options.max_batches = options.workers * options.prefetch + 1;
  pipeline_options.scratch_bytes = compare::kPixels;  // the augmented uint8 image before normalizing
  pipeline_options.shuffle = true;
  pipeline_options.seed = options.seed;
  pipeline_options.epochs = 1 + options.epochs;

  const plimsoll::SampleStage decode_augment = [&data](plimsoll::Sample& sample) {
    const std::span<std::uint8_t> scratch{reinterpret_cast<std::uint8_t*>(sample.scratch.data()), compare::kPixels};
    const std::span<float> pixels{reinterpret_cast<float*>(sample.fields[0].data()), compare::kPixels};
    const std::int64_t label = compare::decode_augment(data, sample.index, sample.seed, scratch, pixels);
    std::memcpy(sample.fields[1].data(), &label, sizeof label);
  };
  plimsoll::Pipeline pipeline(pipeline_options, {decode_augment});

  compare::Consumer consumer(options.step_us);
  compare::RunTimer timer;
  for (;;) {
    const auto asked = Clock::now();
    std::optional<plimsoll::Batch> batch = pipeline.next();
    const auto got = Clock::now();
    if (!batch) break;
    timer.batch(batch->epoch(), asked, got, batch->size());
    consumer.consume(batch->field_as<const float>(0), batch->field_as<const std::int64_t>(1));
    batch->release();
    timer.consumed(Clock::now());
  }

  const plimsoll::PipelineMetrics metrics = pipeline.metrics();
  nlohmann::json line = timer.report(options, consumer, load_s);
  line["loader"] = "plimsoll";
  line["in_flight"] = pipeline_options.max_batches;
  line["peak_bytes_held"] = metrics.peak_bytes_held;
  line["buffers_allocated"] = metrics.buffers_allocated;
  std::cout << line.dump() << '\n';
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  compare::Options options;
  CLI::App app{"Fashion-MNIST through plimsoll::Pipeline; prints one JSON line of throughput and batch waits."};
  compare::add_options(app, options);
  CLI11_PARSE(app, argc, argv);
  try {
    return run(options);
  } catch (const std::exception& error) {
    std::cerr << "plimsoll_pipeline_compare_bench: " << error.what() << '\n';
    return 1;
  }
}
