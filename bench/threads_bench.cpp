// Two threads allocating and freeing at once, as a data-loader thread and the training thread do: the cost of
// sharing one allocator (plimsoll's device lock) against the C library's per-thread arenas.
// Sizes are a real trace's allocation sizes in program order: mostly small tensors with a few huge ones.
// Environment: PLIMSOLL_BENCH_TRACE=FILE picks the trace (default: resnet50-b32.trace of the shared traces).
#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdlib>
#include <string>
#include <vector>

#include "alloc_targets.hpp"
#include "plimsoll/runtime.hpp"
#include "plimsoll/trace.hpp"

namespace {

// Blocks each thread keeps alive: a step holds many activations at once, so the allocator never sees a
// trivially empty heap.
constexpr std::size_t kWindow = 64;

const std::vector<std::size_t>& trace_sizes() {
  static const std::vector<std::size_t> sizes = [] {
    const char* chosen = std::getenv("PLIMSOLL_BENCH_TRACE");
    const std::string path = chosen != nullptr ? chosen : PLIMSOLL_TRACES_DIR "/resnet50-b32.trace";
    const plimsoll::Trace trace = plimsoll::read_trace(path);
    std::vector<std::size_t> result;
    for (const plimsoll::TraceEvent& event : trace.events) {
      if (event.kind == plimsoll::TraceEvent::Kind::allocate) result.push_back(static_cast<std::size_t>(event.bytes));
    }
    return result;
  }();
  return sizes;
}

plimsoll::Allocator& shared_device() {
  static plimsoll::Runtime runtime = [] {
    plimsoll::Config config;
    config.log_device_creation = false;
    return plimsoll::Runtime(config);
  }();
  return runtime.device("cpu");
}

/// Each iteration frees the oldest block of this thread's window and allocates the next trace size in its place.
template <class Target>
void churn(benchmark::State& state, Target& target) {
  const std::vector<std::size_t>& sizes = trace_sizes();
  // Threads start at different points of the trace, so they do not ask for the same size at the same moment.
  std::size_t next = static_cast<std::size_t>(state.thread_index()) * (sizes.size() / 2 + 7);
  std::vector<void*> window(kWindow, nullptr);
  std::size_t oldest = 0;
  for (auto _ : state) {
    void*& slot = window[oldest];
    if (slot != nullptr) target.deallocate(slot);
    // No DoNotOptimize(slot): the pointer is freed later, so the call cannot be dropped, and GCC 12 loses the
    // store to `slot` under Google Benchmark 1.7's "+m,r" constraint (every block then leaked).
    slot = target.allocate(sizes[next % sizes.size()]);
    ++next;
    oldest = (oldest + 1) % kWindow;
  }
  for (void* ptr : window) {
    if (ptr != nullptr) target.deallocate(ptr);
  }
  state.SetItemsProcessed(state.iterations());  // one item: a free plus an allocation
}

void BM_plimsoll(benchmark::State& state) {
  plimsoll::bench::PlimsollTarget target{shared_device()};
  churn(state, target);
}

void BM_malloc(benchmark::State& state) {
  plimsoll::bench::MallocTarget target;
  churn(state, target);
}

}  // namespace

BENCHMARK(BM_plimsoll)->Threads(1)->Threads(2)->UseRealTime();
BENCHMARK(BM_malloc)->Threads(1)->Threads(2)->UseRealTime();

BENCHMARK_MAIN();
