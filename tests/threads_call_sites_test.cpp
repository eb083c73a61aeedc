// CallSites captured from several threads at once (label "threads": the TSan job runs it). Every thread walks
// the same set of paths, so all must agree on each path's id, and the ids must stay dense.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

#include "telemetry/recording/call_sites.hpp"

using plimsoll::telemetry::CallSites;

// thread_local: every thread writes it, and a shared one would be a data race of the test's own.
thread_local volatile int threads_call_sites_sink = 0;

// One distinct stack per path: a frame of path_zero or path_one per bit.
std::uint32_t threads_call_sites_capture_along_bits(CallSites& sites, unsigned path, int bits_left);

[[gnu::noinline]] std::uint32_t threads_call_sites_path_zero(CallSites& sites, unsigned path, int bits_left) {
  const std::uint32_t id = threads_call_sites_capture_along_bits(sites, path, bits_left);
  threads_call_sites_sink = 1;  // not a tail call, so this frame stays on the stack
  return id;
}

[[gnu::noinline]] std::uint32_t threads_call_sites_path_one(CallSites& sites, unsigned path, int bits_left) {
  const std::uint32_t id = threads_call_sites_capture_along_bits(sites, path, bits_left);
  threads_call_sites_sink = 2;
  return id;
}

[[gnu::noinline]] std::uint32_t threads_call_sites_capture_along_bits(CallSites& sites, unsigned path,
                                                                      int bits_left) {
  if (bits_left == 0) return sites.capture(0);
  const auto next = (path & 1U) != 0 ? threads_call_sites_path_one : threads_call_sites_path_zero;
  const std::uint32_t id = next(sites, path >> 1U, bits_left - 1);
  threads_call_sites_sink = 3;
  return id;
}

namespace {

TEST(CallSitesThreads, ConcurrentCapturesAgreeOnIdsWhileOthersDescribe) {
  constexpr int kBits = 10;  // 1024 paths: the table grows while the threads capture
  constexpr unsigned kPaths = 1U << kBits;
  constexpr int kThreads = 4;
  CallSites sites;
  std::vector<std::vector<std::uint32_t>> ids(kThreads, std::vector<std::uint32_t>(kPaths));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&sites, &ids, t] {
      // Each thread starts at a different path, so new stacks are inserted from several threads at once.
      for (unsigned i = 0; i < kPaths; ++i) {
        const unsigned path = (i + static_cast<unsigned>(t) * kPaths / kThreads) % kPaths;
        ids[static_cast<std::size_t>(t)][path] = threads_call_sites_capture_along_bits(sites, path, kBits);
      }
    });
  }
  // Symbolizing alongside the captures must be safe too.
  std::thread describer([&sites] {
    for (int round = 0; round < 20; ++round) {
      const auto known = static_cast<std::uint32_t>(sites.size());
      if (known > 0) (void)sites.describe(known);
      (void)sites.symbolize_all();
    }
  });
  for (auto& thread : threads) thread.join();
  describer.join();

  for (int t = 1; t < kThreads; ++t) EXPECT_EQ(ids[static_cast<std::size_t>(t)], ids[0]) << "thread " << t;
  std::vector<std::uint32_t> sorted = ids[0];
  std::sort(sorted.begin(), sorted.end());
  for (unsigned i = 0; i < kPaths; ++i) ASSERT_EQ(sorted[i], i + 1) << "ids are 1..N, each path its own";
  EXPECT_EQ(sites.size(), kPaths);
}

}  // namespace
