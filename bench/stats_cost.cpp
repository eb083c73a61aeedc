// What one stats() costs on a host device as its reserved address space grows while what is mapped stays the same
// (one 4 MiB block): stats() walks the heap's and the backing's granule bitmaps under their locks, and IdleRelease
// calls it every 100 ms a device. Prints one line per limit: the median over `rounds` of the mean of `calls` calls.
//   plimsoll_stats_cost_bench [calls] [rounds]        (defaults 2000 and 5)
// Built from public headers and the host backing only, so the same source also builds against an older library
// (docs/engine.md, "Returning idle memory", has the command and the figures beside the build before the change).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "backings/host_backing.hpp"
#include "plimsoll/allocator.hpp"

int main(int argc, char** argv) {
  const long calls = argc > 1 ? std::atol(argv[1]) : 2000;
  const long rounds = argc > 2 ? std::atol(argv[2]) : 5;
  if (calls <= 0 || rounds <= 0) {
    std::fprintf(stderr, "usage: %s [calls > 0] [rounds > 0]\n", argv[0]);
    return 2;
  }
  for (const std::uint64_t gib : {std::uint64_t{1}, std::uint64_t{64}, std::uint64_t{1024}}) {
    plimsoll::DeviceDescription device;
    device.name = "cpu";
    device.hardware = "host";
    device.limit_bytes = gib << 30;
    plimsoll::Allocator allocator(device, std::make_unique<plimsoll::backings::HostBacking>());
    void* block = allocator.allocate(std::uint64_t{4} << 20);
    std::vector<double> means;
    std::uint64_t sink = 0;
    for (long round = 0; round < rounds; ++round) {
      const auto start = std::chrono::steady_clock::now();
      for (long i = 0; i < calls; ++i) sink += allocator.stats().reserved_bytes;
      const std::chrono::duration<double, std::micro> took = std::chrono::steady_clock::now() - start;
      means.push_back(took.count() / static_cast<double>(calls));
    }
    std::nth_element(means.begin(), means.begin() + static_cast<long>(means.size() / 2), means.end());
    std::printf("limit %4llu GiB: stats() %.1f us (median of %ld rounds of %ld calls; reserved %llu)\n",
                static_cast<unsigned long long>(gib), means[means.size() / 2], rounds, calls,
                static_cast<unsigned long long>(sink / static_cast<std::uint64_t>(calls * rounds)));
    allocator.deallocate(block);
  }
}
