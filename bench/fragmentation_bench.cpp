// plimsoll_fragmentation_bench: how much memory three allocators' placement rules reserve for real training
// traces. Each trace (../shared/traces) is replayed, in order and without touching memory, under
//   - tf-bfc:       TensorFlow's BFC allocator with allow_growth (reference model, src/plan/allocator_models.hpp),
//   - torch-cuda:   PyTorch's CUDA caching allocator, 1.13 defaults (reference model),
//   - plimsoll:     plimsoll's own engine, on_demand growth, on a simulated device (the real library),
// and the peaks of reserved memory are set against the trace's peak of live (requested) bytes.
//   plimsoll_fragmentation_bench [TRACE...] [--json] [--limit SIZE | --limit-over-live X]
// "maps" are device allocations: BFC regions, caching-allocator segments, plimsoll's backing map calls; "steady"
// counts only those after the end of the first training step, once caches are warm.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "plimsoll/allocator.hpp"
#include "plimsoll/policy.hpp"
#include "plimsoll/runtime.hpp"
#include "plimsoll/size.hpp"
#include "plimsoll/stats.hpp"
#include "plimsoll/trace.hpp"
#include "plan/allocator_models.hpp"

namespace {

using plimsoll::Trace;
using plimsoll::TraceEvent;

struct Counters {
  std::uint64_t peak_in_use_bytes = 0;
  std::uint64_t peak_reserved_bytes = 0;
  std::uint64_t maps = 0;
  std::uint64_t unmaps = 0;
};

struct Row {
  std::string trace;
  std::string allocator;
  std::uint64_t peak_live_bytes = 0;
  std::uint64_t peak_in_use_bytes = 0;
  std::uint64_t peak_reserved_bytes = 0;
  double reserved_over_live = 0;
  std::uint64_t maps = 0;
  std::uint64_t steady_maps = 0;
  std::uint64_t unmaps = 0;
  std::uint64_t steady_unmaps = 0;
  bool oom = false;
  std::uint32_t oom_line = 0;
};

// A reference model behind the replay's interface.
template <class Model>
struct ModelTarget {
  using Handle = std::uint64_t;
  Model model;

  bool allocate(std::uint64_t bytes, Handle& handle) {
    const auto address = model.allocate(bytes);
    if (!address) return false;
    handle = *address;
    return true;
  }
  void deallocate(Handle handle) { model.deallocate(handle); }
  Counters counters() const {
    const plimsoll::plan::ModelStats& stats = model.stats();
    return {stats.peak_in_use_bytes, stats.peak_reserved_bytes, stats.maps, stats.unmaps};
  }
};

// plimsoll's engine through the public API.
struct PlimsollTarget {
  using Handle = void*;
  plimsoll::Allocator& device;

  bool allocate(std::uint64_t bytes, Handle& handle) {
    handle = device.try_allocate(static_cast<std::size_t>(bytes));
    return handle != nullptr;
  }
  void deallocate(Handle handle) { device.deallocate(handle); }
  Counters counters() const {
    const plimsoll::Stats stats = device.stats();
    return {stats.peak_in_use_bytes, stats.peak_reserved_bytes, stats.maps, stats.unmaps};
  }
};

std::string file_name(const std::string& path) { return std::filesystem::path(path).filename().string(); }

/// Runs the trace once through `target`, stopping at the first allocation that fails; frees what is still live.
template <class Target>
Row replay(const Trace& trace, Target& target, std::string allocator) {
  Row row;
  row.trace = file_name(trace.origin);
  row.allocator = std::move(allocator);
  row.peak_live_bytes = trace.peak_live_bytes;

  // Steady state starts at the "# step N end" marker of the first step, as in plimsoll's own replay.
  const std::size_t steady_from = trace.steps.empty() ? trace.events.size() : trace.steps.front().end;
  std::vector<std::optional<typename Target::Handle>> live(trace.slots);
  Counters at_steady;
  bool steady_reached = false;
  for (std::size_t index = 0; index < trace.events.size(); ++index) {
    if (index == steady_from) {
      at_steady = target.counters();
      steady_reached = true;
    }
    const TraceEvent& event = trace.events[index];
    if (event.kind == TraceEvent::Kind::allocate) {
      typename Target::Handle handle{};
      if (!target.allocate(event.bytes, handle)) {
        row.oom = true;
        row.oom_line = event.line;
        break;
      }
      live[event.slot] = handle;
    } else if (event.kind == TraceEvent::Kind::free) {
      target.deallocate(*live[event.slot]);
      live[event.slot].reset();
    }
  }
  const Counters after = target.counters();
  for (auto& handle : live) {
    if (handle) target.deallocate(*handle);
  }

  row.peak_in_use_bytes = after.peak_in_use_bytes;
  row.peak_reserved_bytes = after.peak_reserved_bytes;
  row.reserved_over_live = trace.peak_live_bytes == 0 ? 0.0
                                                      : static_cast<double>(after.peak_reserved_bytes) /
                                                            static_cast<double>(trace.peak_live_bytes);
  row.maps = after.maps;
  row.unmaps = after.unmaps;
  if (steady_reached) {
    row.steady_maps = after.maps - at_steady.maps;
    row.steady_unmaps = after.unmaps - at_steady.unmaps;
  }
  return row;
}

std::vector<Row> replay_all(const Trace& trace, const std::optional<std::uint64_t>& limit) {
  std::vector<Row> rows;
  {
    ModelTarget<plimsoll::plan::BfcModel> bfc{plimsoll::plan::BfcModel({limit, true})};
    rows.push_back(replay(trace, bfc, "tf-bfc"));
  }
  {
    ModelTarget<plimsoll::plan::CudaCachingModel> torch{plimsoll::plan::CudaCachingModel({limit})};
    rows.push_back(replay(trace, torch, "torch-cuda"));
  }
  {
    // A fresh runtime per trace, so the peaks are this trace's alone.
    plimsoll::Config config;
    config.log_device_creation = false;
    config.default_policy.growth = plimsoll::Growth::on_demand;
    config.default_policy.memory_limit = limit;
    plimsoll::Runtime runtime(config);
    PlimsollTarget target{runtime.device("sim:1TiB")};
    rows.push_back(replay(trace, target, "plimsoll"));
  }
  return rows;
}

std::string mib(std::uint64_t bytes) { return fmt::format("{:.1f}", static_cast<double>(bytes) / (1 << 20)); }

void print_table(const std::vector<Row>& rows) {
  const auto line = [](const auto&... cells) {
    std::cout << fmt::format("{:<38} {:<10} {:>10} {:>10} {:>10} {:>8} {:>5} {:>6} {:>6} {:>6}\n", cells...);
  };
  line("trace", "allocator", "live MiB", "in-use MiB", "rsrvd MiB", "rsrvd/", "maps", "steady", "unmaps",
       "steady");
  line("", "", "(peak)", "(peak)", "(peak)", "live", "", "maps", "", "unmaps");
  for (const Row& row : rows) {
    line(row.trace, row.allocator, mib(row.peak_live_bytes), mib(row.peak_in_use_bytes),
         mib(row.peak_reserved_bytes), fmt::format("{:.3f}", row.reserved_over_live), row.maps, row.steady_maps,
         row.unmaps, row.steady_unmaps);
    if (row.oom) std::cout << fmt::format("  ^ out of memory at line {} of the trace\n", row.oom_line);
  }

  // Per allocator, in the order first seen: the range of reserved/live across the traces that ran to the end
  // (a replay stopped by --limit reports the peaks of a partial run).
  struct Range {
    double low = 0;
    double high = 0;
    int traces = 0;
    int ooms = 0;
  };
  std::vector<std::string> order;
  std::map<std::string, Range> ranges;
  for (const Row& row : rows) {
    const auto [entry, inserted] = ranges.try_emplace(row.allocator);
    if (inserted) order.push_back(row.allocator);
    Range& range = entry->second;
    if (row.oom) {
      ++range.ooms;
      continue;
    }
    range.low = range.traces == 0 ? row.reserved_over_live : std::min(range.low, row.reserved_over_live);
    range.high = range.traces == 0 ? row.reserved_over_live : std::max(range.high, row.reserved_over_live);
    ++range.traces;
  }
  std::cout << '\n';
  for (const std::string& allocator : order) {
    const Range& range = ranges[allocator];
    std::string summary =
        range.traces == 0 ? fmt::format("{:<10} reserved/live: no trace ran to the end", allocator)
                          : fmt::format("{:<10} reserved/live across {} traces: {:.2f} to {:.2f} x", allocator,
                                        range.traces, range.low, range.high);
    if (range.ooms > 0) summary += fmt::format(" ({} out of memory, left out)", range.ooms);
    std::cout << summary << '\n';
  }
}

void print_json(const std::vector<Row>& rows) {
  for (const Row& row : rows) {
    const nlohmann::json line = {
        {"trace", row.trace},
        {"allocator", row.allocator},
        {"peak_live_bytes", row.peak_live_bytes},
        {"peak_in_use_bytes", row.peak_in_use_bytes},
        {"peak_reserved_bytes", row.peak_reserved_bytes},
        {"reserved_over_live", row.reserved_over_live},
        {"maps", row.maps},
        {"steady_maps", row.steady_maps},
        {"unmaps", row.unmaps},
        {"steady_unmaps", row.steady_unmaps},
        {"oom", row.oom},
        {"oom_line", row.oom ? nlohmann::json(row.oom_line) : nlohmann::json(nullptr)},
    };
    std::cout << line.dump() << '\n';
  }
}

std::vector<std::string> default_traces() {
  std::vector<std::string> traces;
  const std::filesystem::path folder(PLIMSOLL_TRACES_DIR);
  if (std::filesystem::is_directory(folder)) {
    for (const auto& entry : std::filesystem::directory_iterator(folder)) {
      if (entry.is_regular_file() && entry.path().extension() == ".trace") traces.push_back(entry.path().string());
    }
  }
  std::sort(traces.begin(), traces.end());
  return traces;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> traces;
  bool json = false;
  std::string limit_text;
  double limit_over_live = 0;
  CLI::App app{"Replays allocation traces under TensorFlow BFC (allow_growth), PyTorch CUDA caching allocator and "
               "plimsoll on_demand placement rules; prints peak live vs peak reserved bytes and map counts."};
  app.add_option("traces", traces, "trace files (format: ../shared/traces/README.md); default: every .trace in " +
                                       std::string(PLIMSOLL_TRACES_DIR))
      ->check(CLI::ExistingFile);
  app.add_flag("--json", json, "one JSON line per (trace, allocator) instead of the table");
  app.add_option("--limit", limit_text,
                 "device memory each allocator may reserve (e.g. 16GiB); default: unlimited. Under a limit "
                 "BFC's region garbage collection and PyTorch's release of cached segments come into play");
  app.add_option("--limit-over-live", limit_over_live,
                 "limit each trace's allocators to X times that trace's peak live bytes, rounded up (e.g. 1.03)")
      ->check(CLI::PositiveNumber)
      ->excludes("--limit");
  CLI11_PARSE(app, argc, argv);

  try {
    std::optional<std::uint64_t> limit;
    if (!limit_text.empty()) limit = plimsoll::parse_size(limit_text);
    if (traces.empty()) traces = default_traces();
    if (traces.empty()) {
      std::cerr << "plimsoll_fragmentation_bench: no traces given and none in " << PLIMSOLL_TRACES_DIR << '\n';
      return 1;
    }
    std::vector<Row> rows;
    for (const std::string& path : traces) {
      const Trace trace = plimsoll::read_trace(path);
      const std::optional<std::uint64_t> trace_limit =
          limit_over_live > 0 ? std::optional<std::uint64_t>(static_cast<std::uint64_t>(
                                    std::ceil(limit_over_live * static_cast<double>(trace.peak_live_bytes))))
                              : limit;
      for (Row& row : replay_all(trace, trace_limit)) rows.push_back(std::move(row));
    }
    if (json) {
      print_json(rows);
    } else {
      print_table(rows);
    }
    return 0;
  } catch (const std::exception& error) {
    std::cerr << "plimsoll_fragmentation_bench: " << error.what() << '\n';
    return 1;
  }
}
