// plimsoll_front_so_bench: the per-thread caches' hit path through the shared object the Python module loads
// (libplimsoll_python.so), where thread-locals take the shared-library TLS models. 8 allocations of 4 KiB then their
// 8 frees, 2 million times a round, 9 rounds; prints the median round's nanoseconds per operation (an allocation or
// a free). docs/engine.md, "Figures" (the front's thread-locals, initial-exec), has what it measured.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <vector>

#include "plimsoll/runtime.hpp"

int main() {
  plimsoll::Config config;
  config.log_device_creation = false;
  plimsoll::Runtime runtime(config);
  plimsoll::Allocator& device = runtime.device("cpu");
  device.set_thread_cache(8u << 20);
  constexpr int kPairsPerRound = 2'000'000;
  std::array<void*, 8> blocks{};
  std::vector<double> rounds;
  for (int round = 0; round < 9; ++round) {
    const auto begin = std::chrono::steady_clock::now();
    for (int i = 0; i < kPairsPerRound; ++i) {
      for (void*& block : blocks) block = device.allocate(4096);
      for (void* block : blocks) device.deallocate(block);
    }
    const std::chrono::duration<double, std::nano> took = std::chrono::steady_clock::now() - begin;
    rounds.push_back(took.count() / (kPairsPerRound * 2.0 * static_cast<double>(blocks.size())));
  }
  std::sort(rounds.begin(), rounds.end());
  std::printf("%.2f\n", rounds[rounds.size() / 2]);
  return 0;
}
