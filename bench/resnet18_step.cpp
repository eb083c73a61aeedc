// plimsoll_resnet18_step_bench: training steps of ResNet-18 (resnet18.hpp, 1000 classes) under libtorch on the CPU,
// with plimsoll as libtorch's CPU allocator (--allocator plimsoll) or with whatever malloc the process has
// (--allocator system: glibc, or jemalloc / mimalloc when LD_PRELOADed). Batch 16 of 3x112x112, SGD (lr 0.01,
// momentum 0.9), cross-entropy, torch::set_num_threads(2), a fixed seed; one synthetic batch and its labels are made
// before the timed loop and reused, so every step does the same work. Each step (zero_grad, forward, loss,
// backward, optimizer step) is timed alone, in wall time and in the process's CPU time, and its page faults are
// counted. Prints the per-step times, their median over steps 3..N (1-based: the first two steps create the
// gradients and the momentum buffers), peak RSS and, for plimsoll, the device's peaks; --json prints one line
// instead. Built only when CMake finds libtorch; bench/run_resnet18_allocators.sh runs it.
//
// C++17, like every file that includes libtorch's headers (they fail as C++20 under Clang 14), so plimsoll is
// reached through its C++17-clean headers only: plimsoll/torch.hpp to install it, the C ABI for the device's stats.
#include <dlfcn.h>
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "plimsoll/plimsoll.h"
#include "plimsoll/torch.hpp"
#include "process_memory.hpp"
#include "resnet18.hpp"

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::int64_t kBatch = 16;
constexpr std::int64_t kImageSize = 112;
constexpr std::int64_t kClasses = 1000;
constexpr int kThreads = 2;
constexpr std::size_t kFirstTimedStep = 3;  // 1-based: steps 1 and 2 allocate gradients and momentum buffers

struct Options {
  std::string allocator = "system";
  std::size_t steps = 22;
  std::uint64_t seed = 1;
  std::string label;  // names the run in the output (glibc, jemalloc, ...); default: the allocator
  bool json = false;
};

// Which malloc this process really runs on: jemalloc exports mallctl and mimalloc mi_version, glibc neither. A
// preload that did not take shows here rather than being measured under the wrong name.
std::string process_malloc() {
  if (dlsym(RTLD_DEFAULT, "mallctl") != nullptr) return "jemalloc";
  if (dlsym(RTLD_DEFAULT, "mi_version") != nullptr) return "mimalloc";
  return "glibc";
}

// CPU time of the whole process (all of libtorch's threads, kernel time included), in ms: the work a step costs,
// without the time spent waiting for a CPU. Other work on the machine still inflates it (threads spinning at
// barriers while their partner is descheduled, shared caches), only less than wall time.
double process_cpu_ms() {
  timespec now{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) * 1e3 + static_cast<double>(now.tv_nsec) / 1e6;
}

// Page faults of the process so far that needed no disk (a fresh page zeroed or a cached one mapped): what an
// allocator that hands pages back to the kernel pays again on every step, as kernel time.
std::uint64_t minor_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<std::uint64_t>(usage.ru_minflt);
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// plimsoll's "cpu" device of Runtime::global(), the one install("cpu") routes to, through the C ABI (its C++ side
// is C++20). Throws with plimsoll's message on failure.
plimsoll_stats device_stats() {
  plimsoll_device* device = nullptr;
  plimsoll_stats stats{};
  if (plimsoll_get_device("cpu", &device) != PLIMSOLL_OK || plimsoll_get_stats(device, &stats) != PLIMSOLL_OK) {
    throw std::runtime_error(std::string("plimsoll stats: ") + plimsoll_last_error());
  }
  return stats;
}

int run(const Options& options) {
  const bool plimsoll = options.allocator == "plimsoll";
  // Before the first tensor: tensors made earlier would keep libtorch's allocator.
  if (plimsoll) plimsoll::torch::install("cpu");
  torch::set_num_threads(kThreads);
  torch::manual_seed(options.seed);

  resnet::ResNet18 model(kClasses);
  model->train();
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  const torch::Tensor images = torch::randn({kBatch, 3, kImageSize, kImageSize});
  const torch::Tensor labels = torch::randint(kClasses, {kBatch}, torch::kLong);
  const std::uint64_t rss_before = plimsoll::bench::current_rss_bytes();

  std::vector<double> step_ms;
  std::vector<double> step_cpu_ms;
  std::vector<std::uint64_t> step_faults;
  double loss_value = 0;
  plimsoll_stats before_timed{};
  for (std::size_t step = 1; step <= options.steps; ++step) {
    if (plimsoll && step == kFirstTimedStep) before_timed = device_stats();
    const std::uint64_t faults_begin = minor_faults();
    const auto begin = Clock::now();
    const double cpu_begin = process_cpu_ms();
    optimizer.zero_grad();
    torch::Tensor loss = torch::nn::functional::cross_entropy(model->forward(images), labels);
    loss.backward();
    optimizer.step();
    step_cpu_ms.push_back(process_cpu_ms() - cpu_begin);
    step_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - begin).count());
    step_faults.push_back(minor_faults() - faults_begin);
    loss_value = loss.item<double>();  // outside the timed region; also proves the step's result is read
  }
  const double median_ms = median(std::vector<double>(step_ms.begin() + kFirstTimedStep - 1, step_ms.end()));
  const double median_cpu_ms =
      median(std::vector<double>(step_cpu_ms.begin() + kFirstTimedStep - 1, step_cpu_ms.end()));
  const std::uint64_t peak_rss = plimsoll::bench::peak_rss_bytes();

  nlohmann::json line = {{"allocator", options.allocator},
                         {"label", options.label.empty() ? options.allocator : options.label},
                         {"malloc", process_malloc()},
                         {"model", "resnet18"},
                         {"classes", kClasses},
                         {"batch", kBatch},
                         {"image_size", kImageSize},
                         {"threads", torch::get_num_threads()},
                         {"steps", options.steps},
                         {"first_timed_step", kFirstTimedStep},
                         {"step_ms", step_ms},
                         {"median_ms", median_ms},
                         {"step_cpu_ms", step_cpu_ms},
                         {"median_cpu_ms", median_cpu_ms},
                         {"step_minor_faults", step_faults},
                         {"final_loss", loss_value},
                         {"rss_before_steps_bytes", rss_before},
                         {"peak_rss_bytes", peak_rss}};
  if (plimsoll) {
    const plimsoll_stats stats = device_stats();
    line["peak_reserved_bytes"] = stats.peak_reserved_bytes;
    line["peak_in_use_bytes"] = stats.peak_in_use_bytes;
    line["maps"] = stats.maps;
    line["unmaps"] = stats.unmaps;
    // Maps and unmaps during the timed steps: a steady training loop should need none.
    line["timed_maps"] = stats.maps - before_timed.maps;
    line["timed_unmaps"] = stats.unmaps - before_timed.unmaps;
  }
  if (options.json) {
    std::cout << line.dump() << '\n';
    return 0;
  }
  std::cout << "ResNet-18, batch " << kBatch << ", " << kImageSize << "x" << kImageSize << "x3, " << kClasses
            << " classes, SGD, " << torch::get_num_threads() << " threads; allocator " << options.allocator
            << " (malloc: " << line["malloc"].get<std::string>() << ")\n";
  for (std::size_t i = 0; i < step_ms.size(); ++i) {
    std::cout << "step " << i + 1 << ": " << step_ms[i] << " ms (CPU " << step_cpu_ms[i] << " ms, "
              << step_faults[i] << " minor faults)\n";
  }
  constexpr double kMiB = 1024.0 * 1024.0;
  std::cout << "median of steps " << kFirstTimedStep << ".." << options.steps << ": " << median_ms << " ms (CPU "
            << median_cpu_ms << " ms)\n"
            << "final loss: " << loss_value << "\n"
            << "peak RSS: " << static_cast<double>(peak_rss) / kMiB << " MiB (before the steps: "
            << static_cast<double>(rss_before) / kMiB << " MiB)\n";
  if (plimsoll) {
    std::cout << "plimsoll cpu: peak reserved " << line["peak_reserved_bytes"].get<double>() / kMiB
              << " MiB, peak in use " << line["peak_in_use_bytes"].get<double>() / kMiB << " MiB, maps "
              << line["maps"] << ", unmaps " << line["unmaps"] << " (during steps " << kFirstTimedStep << ".."
              << options.steps << ": " << line["timed_maps"] << " / " << line["timed_unmaps"] << ")\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  CLI::App app{"ResNet-18 training steps under libtorch on the CPU, with plimsoll or the process's malloc as "
               "libtorch's CPU allocator; prints per-step times, their median and peak memory."};
  app.add_option("--allocator", options.allocator,
                 "plimsoll: plimsoll's cpu device; system: the process's malloc (glibc, or an LD_PRELOADed one)")
      ->check(CLI::IsMember({"plimsoll", "system"}));
  app.add_option("--steps", options.steps, "training steps; the median is over steps 3..N")
      ->check(CLI::Range(std::size_t{kFirstTimedStep}, std::size_t{100000}));
  app.add_option("--seed", options.seed, "torch::manual_seed: weights, batch and labels");
  app.add_option("--label", options.label, "the run's name in the output (default: the allocator)");
  app.add_flag("--json", options.json, "one JSON line instead of text");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(options);
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << '\n';
    return 1;
  }
}
