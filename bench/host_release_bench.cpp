// plimsoll_host_release_bench: what giving host memory back to the kernel costs and gains (docs/engine.md,
// "Returning idle memory"). Three ways to run a host device:
//   keep        the default: freed memory stays mapped until trim() (the fast path of repeating steps)
//   threshold0  release_threshold 0: freed memory is unmapped at once, as glibc does with its large blocks
//   idle        the default plus IdleRelease with host_idle_release_defaults() on its background thread
// Part 1 replays shared traces on a host device with every new block touched: ns per allocation or free
// (median of --reps interleaved passes, a fresh device each), and maps and unmaps per steady step (after the
// first step). Part 2 allocates, touches and frees one 1 GiB block and reads the process's RSS right after the
// free and --wait-ms later.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "plimsoll/allocator.hpp"
#include "plimsoll/idle_release.hpp"
#include "plimsoll/runtime.hpp"
#include "plimsoll/size.hpp"
#include "plimsoll/stats.hpp"
#include "plimsoll/trace.hpp"
#include "process_memory.hpp"
#include "telemetry/replay/replay.hpp"

namespace {

constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;
const std::vector<std::string> kModes = {"keep", "threshold0", "idle"};

plimsoll::Config config_for(const std::string& mode) {
  plimsoll::Config config;
  config.log_device_creation = false;
  config.default_policy.memory_limit = 8 * kGiB;
  if (mode == "threshold0") config.default_policy.release_threshold = 0;
  return config;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
}

struct ReplayFigures {
  std::vector<double> ns_per_op;
  double maps_per_step = 0;
  double unmaps_per_step = 0;
};

void replay_once(const plimsoll::Trace& trace, const std::string& mode, ReplayFigures& figures) {
  plimsoll::Runtime runtime(config_for(mode));
  plimsoll::Allocator& cpu = runtime.device("cpu");
  plimsoll::IdleRelease release({&cpu});
  if (mode == "idle") release.start();
  plimsoll::telemetry::ReplayOptions options;
  options.touch_memory = true;
  const plimsoll::telemetry::ReplayResult result = plimsoll::telemetry::replay(trace, cpu, options);
  release.stop();
  figures.ns_per_op.push_back(result.ns_per_op);
  const double steady_steps = trace.steps.size() > 1 ? static_cast<double>(trace.steps.size() - 1) : 1.0;
  figures.maps_per_step = static_cast<double>(result.steady_maps) / steady_steps;
  figures.unmaps_per_step = static_cast<double>(result.steady_unmaps) / steady_steps;
}

struct RssFigures {
  double after_free_mib = 0;
  double after_wait_mib = 0;
};

RssFigures free_one_gib(const std::string& mode, int wait_ms) {
  plimsoll::Runtime runtime(config_for(mode));
  plimsoll::Allocator& cpu = runtime.device("cpu");
  plimsoll::IdleRelease release({&cpu});
  if (mode == "idle") release.start();
  const std::uint64_t before = plimsoll::bench::current_rss_bytes();
  void* block = cpu.allocate(kGiB);
  std::memset(block, 1, kGiB);
  cpu.deallocate(block);
  RssFigures figures;
  const auto over = [before](std::uint64_t now) {
    return static_cast<double>(now > before ? now - before : 0) / static_cast<double>(1 << 20);
  };
  figures.after_free_mib = over(plimsoll::bench::current_rss_bytes());
  std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
  figures.after_wait_mib = over(plimsoll::bench::current_rss_bytes());
  return figures;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Host memory back to the kernel: keep vs release_threshold 0 vs idle release"};
  std::vector<std::string> traces;
  int reps = 5;
  int wait_ms = 1200;
  app.add_option("traces", traces, "Trace files with step markers")->required();
  app.add_option("--reps", reps, "Replays per trace and mode, interleaved (median reported)")->check(CLI::PositiveNumber);
  app.add_option("--wait-ms", wait_ms, "Idle time before the second RSS reading")->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);

  fmt::print("{:<40} {:<11} {:>10} {:>11} {:>13}\n", "trace", "mode", "ns/op", "maps/step", "unmaps/step");
  for (const std::string& path : traces) {
    const plimsoll::Trace trace = plimsoll::read_trace(path);
    std::map<std::string, ReplayFigures> figures;
    for (int rep = 0; rep < reps; ++rep) {
      for (const std::string& mode : kModes) replay_once(trace, mode, figures[mode]);
    }
    const std::string name = path.substr(path.find_last_of('/') + 1);
    for (const std::string& mode : kModes) {
      const ReplayFigures& f = figures[mode];
      fmt::print("{:<40} {:<11} {:>10.1f} {:>11.1f} {:>13.1f}\n", name, mode, median(f.ns_per_op), f.maps_per_step,
                 f.unmaps_per_step);
    }
  }

  fmt::print("\n{:<11} {:>28} {:>28}\n", "mode", "RSS over start after free", fmt::format("after {} ms idle", wait_ms));
  for (const std::string& mode : kModes) {
    const RssFigures rss = free_one_gib(mode, wait_ms);
    fmt::print("{:<11} {:>24.1f} MiB {:>24.1f} MiB\n", mode, rss.after_free_mib, rss.after_wait_mib);
  }
  return 0;
}
