// plimsoll_cross_thread_bench: N threads allocating and freeing on one allocator, with each thread's blocks freed
// by the next thread (--mode cross: PyTorch's autograd frees what the forward pass allocated, on its own threads)
// or by itself (--mode own). Prints one JSON line: operations per second (an allocation or a free is one), the
// median over --reps timed runs in this process. bench/run_cross_threads.sh runs it across allocators.
//
// Each round a thread allocates a batch of blocks (sizes of a real trace, in program order), hands the batch to
// the next thread through a one-slot mailbox, and frees the batch it was handed. The handoff costs every allocator
// the same; batches of 64 keep it small beside the allocator's own work.
#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "alloc_targets.hpp"
#include "plimsoll/runtime.hpp"
#include "plimsoll/trace.hpp"

namespace {

constexpr std::size_t kBatch = 64;

struct Options {
  std::string allocator = "malloc";
  std::string label;
  std::string trace_path;
  std::string mode = "cross";
  int threads = 2;
  int rounds = 4000;
  int reps = 5;
  std::uint64_t thread_cache = 8ull << 20;
  std::uint64_t max_bytes = 1ull << 20;
  std::uint64_t memory_limit = 0;  // 0: the device's default (the host's memory)
};

std::vector<std::size_t> trace_sizes(const Options& options) {
  const plimsoll::Trace trace = plimsoll::read_trace(options.trace_path);
  std::vector<std::size_t> sizes;
  for (const plimsoll::TraceEvent& event : trace.events) {
    if (event.kind == plimsoll::TraceEvent::Kind::allocate && event.bytes <= options.max_bytes)
      sizes.push_back(static_cast<std::size_t>(event.bytes));
  }
  if (sizes.empty()) throw std::runtime_error("no allocation of at most --max-bytes in " + options.trace_path);
  return sizes;
}

void wait_politely(unsigned& spins) {
  if (++spins > 64) std::this_thread::yield();
}

template <class Target>
double run_once(Target& target, const Options& options, const std::vector<std::size_t>& sizes) {
  const auto threads = static_cast<std::size_t>(options.threads);
  std::vector<std::atomic<void**>> mailbox(threads);
  for (auto& slot : mailbox) slot.store(nullptr);
  std::barrier start(static_cast<std::ptrdiff_t>(threads + 1));
  std::vector<std::chrono::steady_clock::time_point> begins(threads), ends(threads);
  auto work = [&](std::size_t id) {
    std::vector<void*> buffers[2] = {std::vector<void*>(kBatch), std::vector<void*>(kBatch)};
    std::size_t next = id * (sizes.size() / threads + 7);
    const std::size_t to = options.mode == "cross" ? (id + 1) % threads : id;
    start.arrive_and_wait();
    begins[id] = std::chrono::steady_clock::now();
    for (int round = 0; round < options.rounds; ++round) {
      std::vector<void*>& batch = buffers[static_cast<std::size_t>(round) % 2];
      for (void*& ptr : batch) ptr = target.allocate(sizes[next++ % sizes.size()]);
      if (options.mode == "cross") {
        unsigned spins = 0;
        void** expected = nullptr;
        while (!mailbox[to].compare_exchange_weak(expected, batch.data(), std::memory_order_release,
                                                  std::memory_order_relaxed)) {
          expected = nullptr;
          wait_politely(spins);
        }
        spins = 0;
        void** handed = nullptr;
        while ((handed = mailbox[id].load(std::memory_order_acquire)) == nullptr) wait_politely(spins);
        for (std::size_t i = 0; i < kBatch; ++i) target.deallocate(handed[i]);
        mailbox[id].store(nullptr, std::memory_order_release);
      } else {
        for (void* ptr : batch) target.deallocate(ptr);
      }
    }
    // The last batch handed on lives in this thread's buffers: wait until the next thread has freed it.
    unsigned spins = 0;
    while (options.mode == "cross" && mailbox[to].load(std::memory_order_acquire) != nullptr) wait_politely(spins);
    ends[id] = std::chrono::steady_clock::now();
  };
  std::vector<std::thread> pool;
  for (std::size_t id = 0; id < threads; ++id) pool.emplace_back(work, id);
  start.arrive_and_wait();
  for (std::thread& thread : pool) thread.join();
  const auto begin = *std::min_element(begins.begin(), begins.end());
  const auto end = *std::max_element(ends.begin(), ends.end());
  const double seconds = std::chrono::duration<double>(end - begin).count();
  const double operations = 2.0 * kBatch * static_cast<double>(options.rounds) * static_cast<double>(threads);
  return operations / seconds;
}

template <class Target>
nlohmann::json measure(Target& target, const Options& options) {
  const std::vector<std::size_t> sizes = trace_sizes(options);
  run_once(target, options, sizes);  // warm: every allocator starts from a heap it has grown once
  std::vector<double> rates;
  for (int rep = 0; rep < options.reps; ++rep) rates.push_back(run_once(target, options, sizes));
  std::sort(rates.begin(), rates.end());
  return {{"allocator", options.label.empty() ? options.allocator : options.label},
          {"mode", options.mode},
          {"threads", options.threads},
          {"ops_per_s", rates[rates.size() / 2]},
          {"min_ops_per_s", rates.front()},
          {"max_ops_per_s", rates.back()}};
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  CLI::App app{"Threads allocating and freeing on one allocator, frees from another thread; one JSON line."};
  app.add_option("--allocator", options.allocator, "malloc (preload jemalloc or mimalloc to measure those), plimsoll")
      ->check(CLI::IsMember({"malloc", "plimsoll"}));
  app.add_option("--label", options.label, "name to report instead of --allocator");
  app.add_option("--trace", options.trace_path, "trace whose allocation sizes are used")->required()->check(CLI::ExistingFile);
  app.add_option("--mode", options.mode, "cross: the next thread frees a thread's blocks; own: each its own")
      ->check(CLI::IsMember({"cross", "own"}));
  app.add_option("--threads", options.threads, "threads")->check(CLI::Range(1, 64));
  app.add_option("--rounds", options.rounds, "batches of 64 per thread and run")->check(CLI::Range(1, 10000000));
  app.add_option("--reps", options.reps, "timed runs (the median is reported)")->check(CLI::Range(1, 1000));
  app.add_option("--thread-cache", options.thread_cache, "plimsoll: Allocator::set_thread_cache bytes (0: off)");
  app.add_option("--max-bytes", options.max_bytes, "only the trace's sizes up to this many bytes");
  app.add_option("--memory-limit", options.memory_limit,
                 "plimsoll: the device's limit in bytes (0: the host's memory); under valgrind, which cannot reserve "
                 "address space for four times the host's memory, e.g. 1073741824");
  CLI11_PARSE(app, argc, argv);
  try {
    if (options.allocator == "malloc") {
      plimsoll::bench::MallocTarget target;
      std::cout << measure(target, options).dump() << '\n';
      return 0;
    }
    plimsoll::Config config;
    config.log_device_creation = false;
    if (options.memory_limit > 0) config.default_policy.memory_limit = options.memory_limit;
    plimsoll::Runtime runtime(config);
    plimsoll::Allocator& device = runtime.device("cpu");
    if (options.thread_cache > 0) device.set_thread_cache(options.thread_cache);
    plimsoll::bench::PlimsollTarget target{device};
    nlohmann::json line = measure(target, options);
    line["thread_cache_bytes"] = options.thread_cache;
    std::cout << line.dump() << '\n';
    return 0;
  } catch (const std::exception& error) {
    std::cerr << "plimsoll_cross_thread_bench: " << error.what() << '\n';
    return 1;
  }
}
