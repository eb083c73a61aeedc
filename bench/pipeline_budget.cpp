// What a byte budget costs in throughput. The consumer is a training step that spins T per batch with lognormal
// jitter, T being the pipeline's mean time to produce a batch (a worker's mean time divided by the number of
// workers): the balanced load, where a queue too shallow to absorb the jitter shows at once. Each run feeds the
// same steps through the same pipeline twice, once under a budget of --budget-batches batches (everything the
// pipeline owns: building, queued, held, idle) and once unbounded, interleaved run by run.
//
//   plimsoll_pipeline_budget_bench [--workers 1] [--produce-ms 2] [--step-ms T] [--sigma 0.5] [--batches 600]
//                                  [--runs 5] [--budget-batches 4] [--sleeping-workers] [--unordered] [--json]
//
// Prints the median batches/s of each, their ratio, and the peak bytes each held against the budget.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "plimsoll/pipeline.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Load {
  std::size_t workers = 1;
  double produce_ms = 2.0;  // one worker's mean time for one batch
  double step_ms = 0;       // the consumer's mean step; 0: produce_ms / workers, the balanced load
  double sigma = 0.5;       // of the lognormal jitter, on both sides
  std::uint64_t batches = 600;
  std::size_t budget_batches = 4;
  bool sleeping_workers = false;  // model I/O-bound stages: the worker sleeps instead of spinning
  bool unordered = false;
};

constexpr std::size_t kBatchSize = 32;
constexpr std::size_t kSampleBytes = 28 * 28 * 4;

void spin_for(std::chrono::nanoseconds duration) {
  const auto until = Clock::now() + duration;
  while (Clock::now() < until) {
  }
}

// Lognormal with the given mean: exp(mu + sigma^2 / 2) = mean.
std::chrono::nanoseconds lognormal(std::mt19937_64& random, double mean_ms, double sigma) {
  if (sigma <= 0) return std::chrono::nanoseconds(static_cast<std::int64_t>(mean_ms * 1e6));
  std::lognormal_distribution<double> draw(std::log(mean_ms) - sigma * sigma / 2.0, sigma);
  return std::chrono::nanoseconds(static_cast<std::int64_t>(draw(random) * 1e6));
}

struct Outcome {
  double batches_per_second = 0;
  std::uint64_t peak_bytes = 0;
  std::uint64_t buffer_bytes = 0;
  double consumer_wait_fraction = 0;
};

Outcome run_once(const Load& load, bool bounded, std::uint64_t seed) {
  plimsoll::PipelineOptions options;
  options.dataset_size = load.batches * kBatchSize;
  options.batch_size = kBatchSize;
  options.sample_fields = {kSampleBytes};
  options.workers = load.workers;
  options.seed = seed;
  options.ordered = !load.unordered;
  const auto produce_ms = load.produce_ms;
  const auto sigma = load.sigma;
  const bool sleeping = load.sleeping_workers;
  plimsoll::SampleStage stage = [produce_ms, sigma, sleeping](plimsoll::Sample& sample) {
    std::fill(sample.fields[0].begin(), sample.fields[0].end(), std::byte{1});
    if (sample.slot != 0) return;
    std::mt19937_64 random(sample.seed);
    const auto work = lognormal(random, produce_ms, sigma);
    if (sleeping)
      std::this_thread::sleep_for(work);
    else
      spin_for(work);
  };
  if (bounded) options.max_bytes = plimsoll::batch_buffer_bytes(options) * load.budget_batches;
  plimsoll::Pipeline pipeline(options, {stage});
  std::mt19937_64 random(seed ^ 0xc0ffee);
  const double step_ms = load.step_ms;
  const auto start = Clock::now();
  std::uint64_t delivered = 0;
  while (auto batch = pipeline.next()) {
    spin_for(lognormal(random, step_ms, load.sigma));
    ++delivered;
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const auto metrics = pipeline.metrics();
  Outcome outcome;
  outcome.batches_per_second = static_cast<double>(delivered) / seconds;
  outcome.peak_bytes = metrics.peak_bytes_held;
  outcome.buffer_bytes = metrics.buffer_bytes;
  outcome.consumer_wait_fraction = std::chrono::duration<double>(metrics.consumer_wait).count() / seconds;
  return outcome;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2.0;
}

}  // namespace

int main(int argc, char** argv) {
  Load load;
  int runs = 5;
  bool json = false;
  CLI::App app{"Throughput of a byte-bounded pipeline against the same pipeline unbounded"};
  app.add_option("--workers", load.workers, "worker threads")->check(CLI::Range(1, 64));
  app.add_option("--produce-ms", load.produce_ms, "one worker's mean milliseconds per batch")
      ->check(CLI::Range(0.01, 1000.0));
  app.add_option("--step-ms", load.step_ms, "the consumer's mean milliseconds per batch (default: balanced)")
      ->check(CLI::Range(0.0, 1000.0));
  app.add_option("--sigma", load.sigma, "sigma of the lognormal jitter of both sides")->check(CLI::Range(0.0, 3.0));
  app.add_option("--batches", load.batches, "batches per run")->check(CLI::Range(10, 1000000));
  app.add_option("--budget-batches", load.budget_batches, "the budget, in batches")->check(CLI::Range(1, 1000));
  app.add_option("--runs", runs, "runs of each (medians are reported)")->check(CLI::Range(1, 100));
  app.add_flag("--sleeping-workers", load.sleeping_workers, "workers sleep instead of spinning (I/O-bound stages)");
  app.add_flag("--unordered", load.unordered, "deliver batches as they finish (both pipelines)");
  app.add_flag("--json", json, "one JSON object instead of the table");
  CLI11_PARSE(app, argc, argv);
  if (load.step_ms == 0) load.step_ms = load.produce_ms / static_cast<double>(load.workers);

  std::vector<double> bounded_rate, unbounded_rate;
  std::uint64_t bounded_peak = 0, unbounded_peak = 0, buffer_bytes = 0;
  std::vector<double> bounded_wait, unbounded_wait;
  for (int run = 0; run < runs; ++run) {
    if (!json) fmt::print(stderr, "\rrun {}/{}", run + 1, runs);
    const auto seed = static_cast<std::uint64_t>(run);
    const Outcome bounded = run_once(load, true, seed);
    const Outcome unbounded = run_once(load, false, seed);
    bounded_rate.push_back(bounded.batches_per_second);
    unbounded_rate.push_back(unbounded.batches_per_second);
    bounded_wait.push_back(bounded.consumer_wait_fraction);
    unbounded_wait.push_back(unbounded.consumer_wait_fraction);
    bounded_peak = std::max(bounded_peak, bounded.peak_bytes);
    unbounded_peak = std::max(unbounded_peak, unbounded.peak_bytes);
    buffer_bytes = bounded.buffer_bytes;
  }
  if (!json) fmt::print(stderr, "\r");
  const double ratio = median(bounded_rate) / median(unbounded_rate);
  const std::uint64_t budget = buffer_bytes * load.budget_batches;
  if (json) {
    fmt::print("{}\n", nlohmann::json{{"workers", load.workers},
                                      {"produce_ms", load.produce_ms},
                                      {"step_ms", load.step_ms},
                                      {"sigma", load.sigma},
                                      {"sleeping_workers", load.sleeping_workers},
                                      {"unordered", load.unordered},
                                      {"budget_bytes", budget},
                                      {"bounded_batches_per_second", median(bounded_rate)},
                                      {"unbounded_batches_per_second", median(unbounded_rate)},
                                      {"ratio", ratio},
                                      {"bounded_peak_bytes", bounded_peak},
                                      {"unbounded_peak_bytes", unbounded_peak}}
                           .dump());
    return 0;
  }
  fmt::print("{} delivery, workers {} ({}), worker {:.2f} ms/batch, step {:.2f} ms/batch, lognormal sigma {}, {} batches x {} runs\n",
             load.unordered ? "unordered" : "ordered", load.workers, load.sleeping_workers ? "sleeping" : "spinning", load.produce_ms,
             load.step_ms, load.sigma, load.batches, runs);
  fmt::print("| pipeline | median batches/s | consumer waits | peak bytes held | budget |\n|---|---:|---:|---:|---:|\n");
  fmt::print("| budget of {} batches | {:.1f} | {:.1f}% | {} | {} |\n", load.budget_batches, median(bounded_rate),
             100 * median(bounded_wait), bounded_peak, budget);
  fmt::print("| unbounded | {:.1f} | {:.1f}% | {} | - |\n", median(unbounded_rate), 100 * median(unbounded_wait),
             unbounded_peak);
  fmt::print("bounded / unbounded throughput: {:.3f}; peak within budget: {}\n", ratio,
             bounded_peak <= budget ? "yes" : "NO");
  return 0;
}
