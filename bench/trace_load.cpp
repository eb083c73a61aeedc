// How fast read_trace loads a large trace, in each format it reads: plimsoll's binary recording, the shared
// text format and RMM's logging CSV. The same program (alloc/free pairs, a few hundred live, step markers) is
// written in all three, from one generator, so the figures compare formats, not workloads.
//
//   plimsoll_trace_load_bench [--events 10000000] [--runs 3] [--dir /tmp]
//
// Prints one line per format (file size, median load seconds, events per second) and, with --json, one JSON
// object per format. The files are deleted at the end.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "plimsoll/allocator.hpp"
#include "plimsoll/recording.hpp"
#include "plimsoll/trace.hpp"
#include "backings/sim_backing.hpp"

namespace {

constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;
constexpr std::size_t kLive = 256;       // allocations live at once
constexpr std::size_t kStepEvents = 100'000;

// The size of the i-th allocation: spread over 64 B .. 16 MiB like a training step's tensors.
std::uint64_t size_of(std::size_t i) { return std::uint64_t{64} << (i * 7 % 19); }

// The shared text format and RMM's CSV, written with one pass over the same program.
void write_text_formats(std::size_t events, const std::string& text_path, const std::string& csv_path) {
  std::FILE* text = std::fopen(text_path.c_str(), "w");
  std::FILE* csv = std::fopen(csv_path.c_str(), "w");
  if (text == nullptr || csv == nullptr) throw std::runtime_error("cannot write the generated traces");
  fmt::print(csv, "Thread,Time,Action,Pointer,Size,Stream\n");
  std::vector<std::uint64_t> live_sizes(kLive, 0);
  std::size_t written = 0;
  int step = 0;
  fmt::print(text, "# step {} begin\n", step);
  for (std::size_t i = 0; written < events; ++i) {
    const std::size_t slot = i % kLive;
    const std::uint64_t micros = i;
    const auto time = fmt::format("{:02}:{:02}:{:02}.{:06}", micros / 3'600'000'000 % 24, micros / 60'000'000 % 60,
                                  micros / 1'000'000 % 60, micros % 1'000'000);
    if (live_sizes[slot] != 0) {
      fmt::print(text, "f {}\n", i - kLive + 1);
      fmt::print(csv, "1,{},free,{:#x},{},0x0\n", time, 0x10000000 + slot * 0x1000000, live_sizes[slot]);
      ++written;
    }
    live_sizes[slot] = size_of(i);
    fmt::print(text, "a {} {}\n", i + 1, live_sizes[slot]);
    fmt::print(csv, "1,{},allocate,{:#x},{},0x0\n", time, 0x10000000 + slot * 0x1000000, live_sizes[slot]);
    ++written;
    if (i % kStepEvents == kStepEvents - 1) {
      fmt::print(text, "# step {} end\n# step {} begin\n", step, step + 1);
      ++step;
    }
  }
  fmt::print(text, "# step {} end\n", step);
  std::fclose(text);
  std::fclose(csv);
}

// plimsoll's own format, written by a real Recording of a simulated device running the same program.
void write_recording(std::size_t events, const std::string& path) {
  plimsoll::DeviceDescription description;
  description.name = "sim:64GiB";
  description.policy.growth = plimsoll::Growth::preallocate;
  description.limit_bytes = 16 * kGiB;
  description.total_bytes = 64 * kGiB;
  plimsoll::Allocator device(description, std::make_unique<plimsoll::backings::SimBacking>(64 * kGiB));
  auto recording = plimsoll::Recording::open(path);
  device.record_to(recording);
  std::vector<void*> live(kLive, nullptr);
  for (std::size_t i = 0; recording->events() < events; ++i) {
    const std::size_t slot = i % kLive;
    if (live[slot] != nullptr) device.deallocate(live[slot]);
    live[slot] = device.allocate(size_of(i));
    if (i % kStepEvents == 0) plimsoll::step();
  }
  device.record_to(nullptr);
  recording->close();
  for (void* block : live) device.deallocate(block);
}

struct Figure {
  std::string format;
  std::uintmax_t file_bytes = 0;
  std::size_t events = 0;
  double median_seconds = 0;
};

Figure time_loads(const std::string& format, const std::string& path, int runs) {
  std::vector<double> seconds;
  std::size_t events = 0;
  for (int run = 0; run < runs; ++run) {
    const auto start = std::chrono::steady_clock::now();
    const plimsoll::Trace trace = plimsoll::read_trace(path);
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    events = trace.events.size();
    fmt::print(stderr, "  {} run {}/{}: {:.3f} s\n", format, run + 1, runs, seconds.back());
  }
  std::sort(seconds.begin(), seconds.end());
  return {format, std::filesystem::file_size(path), events, seconds[seconds.size() / 2]};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Times read_trace on a generated trace in each format it reads"};
  std::size_t events = 10'000'000;
  int runs = 3;
  std::string dir = std::filesystem::temp_directory_path().string();
  bool json = false;
  app.add_option("--events", events, "events per trace")->check(CLI::Range(std::size_t{1000}, std::size_t{1} << 32));
  app.add_option("--runs", runs, "loads per format (the median is reported)")->check(CLI::Range(1, 100));
  app.add_option("--dir", dir, "folder for the generated files")->check(CLI::ExistingDirectory);
  app.add_flag("--json", json, "one JSON object per format");
  CLI11_PARSE(app, argc, argv);

  const std::string stem = fmt::format("{}/plimsoll-load-{}", dir, ::getpid());
  const std::string binary_path = stem + ".plimsoll";
  const std::string text_path = stem + ".trace";
  const std::string csv_path = stem + ".csv";
  fmt::print(stderr, "writing {} events in each format under {}...\n", events, dir);
  write_recording(events, binary_path);
  write_text_formats(events, text_path, csv_path);

  std::vector<Figure> figures;
  figures.push_back(time_loads("plimsoll binary", binary_path, runs));
  figures.push_back(time_loads("text (shared traces)", text_path, runs));
  figures.push_back(time_loads("RMM CSV", csv_path, runs));
  for (const std::string& path : {binary_path, text_path, csv_path}) std::filesystem::remove(path);

  fmt::print("| format | events | file MiB | median load s | M events/s |\n|---|---:|---:|---:|---:|\n");
  for (const Figure& figure : figures) {
    if (json) {
      fmt::print("{}\n", nlohmann::json{{"format", figure.format},
                                        {"events", figure.events},
                                        {"file_bytes", figure.file_bytes},
                                        {"median_seconds", figure.median_seconds}}
                             .dump());
      continue;
    }
    fmt::print("| {} | {} | {:.0f} | {:.2f} | {:.1f} |\n", figure.format, figure.events,
               static_cast<double>(figure.file_bytes) / (1 << 20), figure.median_seconds,
               static_cast<double>(figure.events) / figure.median_seconds / 1e6);
  }
  return 0;
}
