// The whole-run packing on several threads (RunSearch::jobs, engine/ordered_jobs.hpp): the plan is the one the
// serial packing finds, byte for byte in its file; progress comes from the caller's thread, one line per packing;
// a worker's exception reaches the caller. Built under TSan too (.ci/run's tsan phase runs the engine label).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <new>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "engine/ordered_jobs.hpp"
#include "engine/run_input.hpp"
#include "engine/run_packing.hpp"
#include "engine/run_plan.hpp"
#include "plimsoll/trace.hpp"
#include "run_packing_checks.hpp"

namespace {

constexpr std::uint64_t kMiB = 1ull << 20;

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "run_packing_jobs_" +
         ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" + std::to_string(::getpid()) + "_" +
         name;
}

std::string contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

struct Packed {
  std::string file;                 // the plan's file, as written
  std::vector<std::string> lines;   // the progress lines
  bool one_thread = true;           // every progress line came from the caller's thread
};

// The trace packed with `search` on `jobs` threads, written to a file and read back as bytes.
Packed pack(const plimsoll::Trace& trace, std::size_t end, plimsoll::engine::RunSearch search, std::size_t jobs) {
  search.jobs = jobs;
  const plimsoll::engine::StepObservation run = plimsoll::engine::observe_run(trace, end);
  Packed packed;
  const std::thread::id caller = std::this_thread::get_id();
  const plimsoll::engine::RunPacking packing = plimsoll::engine::pack_run(run, search, [&](const std::string& line) {
    packed.lines.push_back(line);
    if (std::this_thread::get_id() != caller) packed.one_thread = false;
  });
  plimsoll::testing::expect_valid(run, packing.plan);
  const std::string path = temp_path(std::to_string(jobs) + ".plan");
  plimsoll::engine::write_run_plan(
      plimsoll::engine::make_run_plan(packing, {.limit = 64 * kMiB, .through_step = 0, .source = trace.origin}),
      path);
  packed.file = contents(path);
  std::filesystem::remove(path);
  return packed;
}

std::size_t count_starting(const std::vector<std::string>& lines, const std::string& prefix) {
  std::size_t n = 0;
  for (const std::string& line : lines)
    if (line.rfind(prefix, 0) == 0) ++n;
  return n;
}

// A constructed run where greedy packings leave holes (mixed sizes, freed in two waves), searched from every greedy
// packing with three seeds: 14 packings and 42 searches, on 1, 2 and 4 threads.
TEST(RunPackingJobs, AConstructedRunPacksTheSameOnAnyNumberOfThreads) {
  std::string text;
  const std::uint64_t sizes[] = {3 * kMiB / 2, 5 * kMiB / 4, 9 * kMiB / 8, 7 * kMiB / 4, 3 * kMiB / 4};
  int id = 1;
  for (int round = 0; round < 6; ++round) {
    for (int k = 0; k < 5; ++k) text += "a " + std::to_string(id + k) + " " + std::to_string(sizes[static_cast<std::size_t>((k + round) % 5)]) + "\n";
    for (int k = 0; k < 5; k += 2) text += "f " + std::to_string(id + k) + "\n";
    for (int k = 1; k < 5; k += 2) text += "f " + std::to_string(id + k) + "\n";
    id += 5;
  }
  const plimsoll::Trace trace = plimsoll::parse_trace(text, "constructed.trace");
  const plimsoll::engine::RunSearch search{.work = 100'000, .seeds = 3, .all_starts = true};
  const Packed serial = pack(trace, trace.events.size(), search, 1);
  ASSERT_FALSE(serial.file.empty());
  EXPECT_EQ(count_starting(serial.lines, "packing "), 15u);  // the announcement, then one line per packing
  for (const std::size_t jobs : {2u, 4u}) {
    const Packed parallel = pack(trace, trace.events.size(), search, jobs);
    EXPECT_EQ(parallel.file, serial.file) << jobs << " threads";
    EXPECT_TRUE(parallel.one_thread) << jobs << " threads";
    EXPECT_EQ(count_starting(parallel.lines, "packing "), 15u) << jobs << " threads";
    EXPECT_EQ(count_starting(parallel.lines, "search "), count_starting(serial.lines, "search ")) << jobs;
  }
}

// The run where only the search reaches the lower bound (3 granules; engine_run_packing_test's
// TheSearchBeatsEveryGreedyPacking), with several seeds from every start: the serial loop stops at the first search
// reaching the bound, and the parallel one keeps that search's plan too.
TEST(RunPackingJobs, TheFirstSearchReachingTheBoundIsKept) {
  const plimsoll::Trace trace = plimsoll::parse_trace(
      "a 1 2883584\na 2 3145728\nf 1\na 3 1572864\na 4 1572864\nf 4\nf 2\na 5 786432\na 6 2883584\n"
      "a 7 1048576\nf 5\nf 6\na 8 1048576\nf 7\na 9 1835008\na 10 786432\nf 3\nf 10\nf 9\na 11 524288\n"
      "f 11\nf 8\n",
      "constructed.trace");
  const plimsoll::engine::RunSearch search{.work = 200'000, .seeds = 4, .all_starts = true};
  const Packed serial = pack(trace, trace.events.size(), search, 1);
  for (const std::size_t jobs : {2u, 8u}) {
    EXPECT_EQ(pack(trace, trace.events.size(), search, jobs).file, serial.file) << jobs << " threads";
  }
}

// A slice of a real trace (GPT through step 1, 1,329 requests), two seeds: the same file on 1 and 3 threads.
TEST(RunPackingJobs, ARealSlicePacksTheSameOnAnyNumberOfThreads) {
  const plimsoll::Trace trace = plimsoll::read_trace(PLIMSOLL_TRACES_DIR "/gpt-6-512-b8.trace");
  const std::size_t end = plimsoll::engine::run_end(trace, 1);
  const plimsoll::engine::RunSearch search{.work = 300'000, .seeds = 2};
  const Packed serial = pack(trace, end, search, 1);
  const Packed parallel = pack(trace, end, search, 3);
  EXPECT_EQ(parallel.file, serial.file);
  EXPECT_TRUE(parallel.one_thread);
}

// run_ordered itself: results in index order whatever the finish order, done once per job on the caller's thread.
TEST(OrderedJobs, ResultsComeInIndexOrderAndDoneRunsOnTheCaller) {
  for (const std::size_t threads : {0u, 1u, 3u, 16u}) {
    const std::thread::id caller = std::this_thread::get_id();
    std::vector<int> seen(20, 0);
    bool on_caller = true;
    const std::vector<std::size_t> squares = plimsoll::engine::run_ordered<std::size_t>(
        20, threads,
        [](std::size_t i) {
          if (i % 3 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // later jobs finish first
          return i * i;
        },
        [&](std::size_t i, std::size_t square) {
          EXPECT_EQ(square, i * i);
          ++seen[i];
          on_caller = on_caller && std::this_thread::get_id() == caller;
        });
    ASSERT_EQ(squares.size(), 20u);
    for (std::size_t i = 0; i < 20; ++i) {
      EXPECT_EQ(squares[i], i * i) << threads;
      EXPECT_EQ(seen[i], 1) << i << " on " << threads;
    }
    EXPECT_TRUE(on_caller) << threads;
  }
}

// A worker's std::bad_alloc reaches the caller (the lowest index's when two throw), after every worker is joined.
TEST(OrderedJobs, AWorkersExceptionReachesTheCaller) {
  for (const std::size_t threads : {1u, 4u}) {
    std::atomic<int> running{0};
    const auto run = [&] {
      (void)plimsoll::engine::run_ordered<int>(
          12, threads,
          [&](std::size_t i) -> int {
            ++running;
            if (i == 5) {
              --running;
              throw std::bad_alloc();
            }
            if (i == 7) {
              --running;
              throw std::runtime_error("seven");
            }
            --running;
            return static_cast<int>(i);
          },
          [](std::size_t, int) {});
    };
    EXPECT_THROW(run(), std::bad_alloc) << threads;
    EXPECT_EQ(running.load(), 0) << threads;
  }
}

// An exception from done (a progress line that cannot be written) stops the jobs and reaches the caller too.
TEST(OrderedJobs, AnExceptionFromDoneReachesTheCaller) {
  std::atomic<int> started{0};
  EXPECT_THROW((void)plimsoll::engine::run_ordered<int>(
                   200, 2,
                   [&](std::size_t i) {
                     ++started;
                     std::this_thread::sleep_for(std::chrono::milliseconds(1));
                     return static_cast<int>(i);
                   },
                   [](std::size_t, int) { throw std::runtime_error("stderr closed"); }),
               std::runtime_error);
  EXPECT_LT(started.load(), 200);
}

}  // namespace
