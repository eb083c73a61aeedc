// plimsoll_run_plan_io: how long a run plan file takes to write and to read (with every check read_run_plan makes),
// at 10^5 and 10^6 entries (docs/run-plans.md). Plans reach 10^5-10^6 entries (MobileNetV2: 28,000 requests a step),
// so both must stay linear. Synthetic entries of mixed sizes at scattered offsets; medians of 5 runs each.
//   plimsoll_run_plan_io [DIR]   (the file is written in DIR, default /tmp, and removed)
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/run_plan.hpp"

int main(int argc, char** argv) {
  using plimsoll::engine::RunPlan;
  const std::filesystem::path dir = argc > 1 ? argv[1] : "/tmp";
  const std::string path = (dir / "plimsoll_run_plan_io.plan").string();
  for (const std::uint64_t n : {100'000ull, 1'000'000ull}) {
    RunPlan plan;
    plan.source = "synthetic";
    for (std::uint64_t i = 0; i < n; ++i) plan.entries.push_back({256 * (i % 4000 + 1), (i * 7919 % 100'000) * 4096});
    plan.covered_granules = plimsoll::engine::count_covered_granules(plan.entries, plan.granule);
    for (std::size_t i = 0; i < RunPlan::kFingerprint; ++i) plan.fingerprint.push_back(plan.entries[i].size);
    constexpr int kRuns = 5;
    std::vector<double> write_s, read_s;
    for (int run = 0; run < kRuns; ++run) {
      const auto t0 = std::chrono::steady_clock::now();
      plimsoll::engine::write_run_plan(plan, path);
      const auto t1 = std::chrono::steady_clock::now();
      const RunPlan back = plimsoll::engine::read_run_plan(path);
      const auto t2 = std::chrono::steady_clock::now();
      if (!(back == plan)) {
        std::fprintf(stderr, "error: the plan read back differs from the one written\n");
        return 1;
      }
      write_s.push_back(std::chrono::duration<double>(t1 - t0).count());
      read_s.push_back(std::chrono::duration<double>(t2 - t1).count());
    }
    std::sort(write_s.begin(), write_s.end());
    std::sort(read_s.begin(), read_s.end());
    std::printf("%llu entries, %llu bytes: write median %.3f s, read median %.3f s (of %d)\n",
                static_cast<unsigned long long>(n),
                static_cast<unsigned long long>(std::filesystem::file_size(path)), write_s[kRuns / 2],
                read_s[kRuns / 2], kRuns);
  }
  std::filesystem::remove(path);
  return 0;
}
