// plimsoll_replay_bench: replays a real allocation trace against one allocator and prints one JSON line.
// One allocator per process, so no allocator inherits another's heap, page cache or RSS high-water mark;
// bench/run_replay.sh runs the processes interleaved and tabulates them.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "alloc_targets.hpp"
#include "cycle_clock.hpp"
#include "plimsoll/policy.hpp"
#include "plimsoll/recording.hpp"
#include "plimsoll/runtime.hpp"
#include "plimsoll/trace.hpp"
#include "process_memory.hpp"
#include "trace_replay.hpp"

namespace {

using plimsoll::bench::CycleClock;

struct Options {
  std::string allocator;
  std::string trace_path;
  int reps = 10;
  bool touch = false;
  std::string label;
  std::string record_path;  // plimsoll only: record every event to this trace file while replaying
  bool call_sites = false;
  std::string device = "cpu";  // plimsoll only: cuda:0 replays on a GPU (host time per call, device memory)
  std::uint64_t thread_cache = 0;  // plimsoll only: Allocator::set_thread_cache (0: off)
  std::uint64_t memory_limit = 0;  // plimsoll only: the device's memory_limit (0: the default policy's)
};

struct Measurement {
  double cold_mean_ns = 0;
  double mean_ns = 0;  // median over the warm passes
  double min_mean_ns = 0;
  double max_mean_ns = 0;
  double p50_ns = 0;
  double p99_ns = 0;
  double p999_ns = 0;
};

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
}

double quantile_ns(std::vector<std::uint64_t>& ticks, double q, const CycleClock& clock) {
  if (ticks.empty()) return 0;
  const auto index = static_cast<std::size_t>(q * static_cast<double>(ticks.size() - 1));
  std::nth_element(ticks.begin(), ticks.begin() + static_cast<std::ptrdiff_t>(index), ticks.end());
  return clock.to_ns(ticks[index]);
}

/// A cold pass (the allocator starts empty), `reps` warm passes timed whole, then one more warm pass timing
/// each operation for the tail. Per-operation timing runs apart so that its cost never enters the mean.
template <class Target>
Measurement measure(const plimsoll::Trace& trace, Target& target, const Options& options) {
  using Clock = std::chrono::steady_clock;
  plimsoll::bench::TraceReplay<Target> replay(trace, target, options.touch);
  const auto ops = static_cast<double>(std::max<std::size_t>(replay.operations(), 1));
  const auto timed_pass_ns = [&] {
    const auto begin = Clock::now();
    replay.run();
    return std::chrono::duration<double, std::nano>(Clock::now() - begin).count() / ops;
  };

  Measurement result;
  result.cold_mean_ns = timed_pass_ns();
  std::vector<double> warm;
  for (int rep = 0; rep < options.reps; ++rep) warm.push_back(timed_pass_ns());
  result.mean_ns = median(warm);
  result.min_mean_ns = *std::min_element(warm.begin(), warm.end());
  result.max_mean_ns = *std::max_element(warm.begin(), warm.end());

  const CycleClock clock = CycleClock::calibrate();
  std::vector<std::uint64_t> ticks;
  replay.run_timed([] { return CycleClock::now(); }, ticks);
  result.p50_ns = quantile_ns(ticks, 0.50, clock);
  result.p99_ns = quantile_ns(ticks, 0.99, clock);
  result.p999_ns = quantile_ns(ticks, 0.999, clock);
  return result;
}

plimsoll::Config plimsoll_config(plimsoll::Growth growth, std::uint64_t memory_limit) {
  plimsoll::Config config;
  config.log_device_creation = false;
  config.default_policy.growth = growth;
  if (memory_limit != 0) config.default_policy.memory_limit = memory_limit;
  return config;
}

nlohmann::json report(const Options& options, const plimsoll::Trace& trace, const Measurement& m,
                      std::uint64_t baseline_rss) {
  const char* preload = std::getenv("LD_PRELOAD");
  return {
      {"allocator", options.label.empty() ? options.allocator : options.label},
      {"mode", options.allocator},
      {"preload", preload != nullptr ? preload : ""},
      {"trace", trace.origin.substr(trace.origin.find_last_of('/') + 1)},
      {"touch", options.touch},
      {"reps", options.reps},
      {"ops", trace.allocations + trace.frees},
      {"cold_mean_ns", m.cold_mean_ns},
      {"mean_ns", m.mean_ns},
      {"min_mean_ns", m.min_mean_ns},
      {"max_mean_ns", m.max_mean_ns},
      {"p50_ns", m.p50_ns},
      {"p99_ns", m.p99_ns},
      {"p999_ns", m.p999_ns},
      {"peak_rss_bytes", plimsoll::bench::peak_rss_bytes()},
      {"baseline_rss_bytes", baseline_rss},
      {"trace_peak_requested_bytes", trace.peak_live_bytes},
  };
}

int run(const Options& options) {
  const plimsoll::Trace trace = plimsoll::read_trace(options.trace_path);

  if (options.allocator == "none") {
    if (options.touch)
      throw std::runtime_error("--allocator none hands out fake addresses, which --touch cannot write; drop --touch");
    plimsoll::bench::EmptyTarget target;
    const std::uint64_t baseline = plimsoll::bench::current_rss_bytes();
    const Measurement m = measure(trace, target, options);
    nlohmann::json line = report(options, trace, m, baseline);
    line["peak_reserved"] = nullptr;
    line["peak_live"] = nullptr;
    std::cout << line.dump() << '\n';
    return 0;
  }

  if (options.allocator == "malloc") {
    plimsoll::bench::MallocTarget target;
    const std::uint64_t baseline = plimsoll::bench::current_rss_bytes();
    const Measurement m = measure(trace, target, options);
    nlohmann::json line = report(options, trace, m, baseline);
    line["peak_reserved"] = nullptr;  // the C library does not say
    line["peak_live"] = trace.peak_live_bytes;
    std::cout << line.dump() << '\n';
    return 0;
  }

  const auto growth = plimsoll::parse_growth(options.allocator.substr(std::string("plimsoll-").size()));
  plimsoll::Runtime runtime(plimsoll_config(growth, options.memory_limit));
  plimsoll::Allocator& device = runtime.device(options.device);
  if (options.touch && device.description().name.rfind("cpu", 0) != 0)
    throw std::runtime_error("--touch writes through the pointers, which only host memory allows; drop --touch for " +
                             options.device);
  if (options.thread_cache > 0) device.set_thread_cache(options.thread_cache);
  plimsoll::bench::PlimsollTarget target{device};
  std::shared_ptr<plimsoll::Recording> recording;
  if (!options.record_path.empty()) {
    recording = plimsoll::Recording::open(options.record_path, {.call_sites = options.call_sites});
    device.record_to(recording);
  }
  const std::uint64_t baseline = plimsoll::bench::current_rss_bytes();
  const Measurement m = measure(trace, target, options);
  if (recording) {
    device.record_to(nullptr);
    recording->close();
  }
  const plimsoll::Stats stats = device.stats();
  nlohmann::json line = report(options, trace, m, baseline);
  line["peak_reserved"] = stats.peak_reserved_bytes;
  line["peak_live"] = stats.peak_in_use_bytes;
  line["recorded_events"] = recording ? recording->events() : 0;
  line["call_sites"] = options.call_sites;
  line["maps"] = stats.maps;
  line["unmaps"] = stats.unmaps;
  line["device"] = device.description().name;
  line["thread_cache_bytes"] = options.thread_cache;
  std::cout << line.dump() << '\n';
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  CLI::App app{"Replays an allocation trace against one allocator; prints one JSON line of timings and memory."};
  app.add_option("--allocator", options.allocator, "plimsoll-on_demand, plimsoll-preallocate or malloc "
                 "(posix_memalign(64)/free; preload jemalloc or mimalloc to measure those), or none "
                 "(no allocator: what the harness itself costs per operation)")
      ->required()
      ->check(CLI::IsMember({"plimsoll-on_demand", "plimsoll-preallocate", "malloc", "none"}));
  app.add_option("--trace", options.trace_path, "trace file (format: ../shared/traces/README.md)")
      ->required()
      ->check(CLI::ExistingFile);
  app.add_option("--reps", options.reps, "warm passes after the cold one")->check(CLI::Range(1, 100000));
  app.add_flag("--touch", options.touch, "write one byte in every page of each new block (first-touch cost)");
  app.add_option("--label", options.label, "name to report instead of --allocator (e.g. jemalloc)");
  app.add_option("--record", options.record_path, "plimsoll only: record every event to this trace file");
  app.add_flag("--call-sites", options.call_sites, "with --record: capture the call site of every allocation");
  app.add_option("--device", options.device, "plimsoll only: the device to replay on (default cpu; cuda:0 on a GPU)");
  app.add_option("--thread-cache", options.thread_cache,
                 "plimsoll only: per-thread cache bytes (Allocator::set_thread_cache; default 0, off)");
  // valgrind cannot reserve the default limit's address space (several times the host's memory): profiles under
  // cachegrind or callgrind pass a limit above the trace's peak, e.g. 3GiB for GPT's trace, 8GiB for the CNN ones.
  app.add_option("--memory-limit", options.memory_limit,
                 "plimsoll only: the device's memory limit in bytes (default 0: the default policy's)");
  CLI11_PARSE(app, argc, argv);

  try {
    return run(options);
  } catch (const std::exception& error) {
    std::cerr << "plimsoll_replay_bench: " << error.what() << '\n';
    return 1;
  }
}
