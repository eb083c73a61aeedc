// One recording fed by several threads at once, through small buffers, so the background writer hands buffers
// back and forth thousands of times (label "threads": the TSan job runs it). Every event must reach the file
// whole and exactly once, and each thread's events in the order it made them.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "backings/sim_backing.hpp"
#include "plimsoll/allocator.hpp"
#include "plimsoll/recording.hpp"
#include "plimsoll/trace.hpp"

namespace plimsoll {
namespace {

constexpr std::uint64_t GiB = std::uint64_t{1} << 30;

TEST(RecordingThreads, EveryEventOfEveryThreadArrivesOnceAndInOrder) {
  constexpr int kThreads = 4;
  constexpr int kPairs = 5000;
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("plimsoll-threads-recording-" + std::to_string(::getpid()) + ".plimsoll"))
                               .string();
  DeviceDescription description;
  description.name = "sim:4GiB";
  description.policy.growth = Growth::preallocate;  // no map events: only the threads' own allocations
  description.limit_bytes = 1 * GiB;
  description.total_bytes = 4 * GiB;
  Allocator device(description, std::make_unique<backings::SimBacking>(4 * GiB));
  auto recording = Recording::open(path, {.buffer_bytes = 0});
  device.record_to(recording);

  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&device, t] {
      // Sizes encode the thread and the pair's index, so the reader can check each thread's order.
      for (int i = 0; i < kPairs; ++i) {
        device.deallocate(device.allocate(static_cast<std::uint64_t>(t) * 1'000'000 + static_cast<std::uint64_t>(i) + 1));
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  device.record_to(nullptr);
  recording->close();

  const Trace trace = read_trace(path);
  std::filesystem::remove(path);
  EXPECT_EQ(trace.allocations, static_cast<std::size_t>(kThreads * kPairs));
  EXPECT_EQ(trace.frees, static_cast<std::size_t>(kThreads * kPairs));
  EXPECT_FALSE(trace.cut_short);
  std::map<std::uint32_t, std::uint64_t> last_size_by_thread;
  for (const TraceEvent& event : trace.events) {
    if (event.kind != TraceEvent::Kind::allocate) continue;
    std::uint64_t& last = last_size_by_thread[event.thread];
    EXPECT_GT(event.bytes, last) << "thread " << event.thread << " out of order";
    last = event.bytes;
  }
  EXPECT_EQ(last_size_by_thread.size(), static_cast<std::size_t>(kThreads));
}

}  // namespace
}  // namespace plimsoll
