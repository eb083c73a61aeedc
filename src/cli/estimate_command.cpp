// `plimsoll estimate batch` and `plimsoll estimate table`: the memory of input batches, worked out before a run
// (docs/estimate.md). Numbers are taken as text and parsed by the library, so a bad value is a plimsoll error
// (exit status 2, a message naming the value and the fix) like every other bad input.
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "cli/option_values.hpp"
#include "telemetry/reports/report_json.hpp"
#include "cli/output.hpp"
#include "plimsoll/estimate.hpp"
#include "plimsoll/size.hpp"

namespace {

using plimsoll::format_size;
using Align = plimsoll::cli::Table::Align;

struct BatchArgs {
  std::string shape;
  std::string batch;
  std::string dtype = "float32";
  std::string queue = "10";
  std::string workers = "4";
  std::string budget;  // empty: no budget
  bool json = false;
};

struct TableArgs {
  std::string dtype = "float32";
  std::string channels = "3";
  bool json = false;
};

plimsoll::BatchPipeline pipeline_from(const BatchArgs& args) {
  plimsoll::BatchPipeline pipeline;
  pipeline.sample = plimsoll::cli::for_option("--shape", [&] { return plimsoll::parse_shape(args.shape); });
  pipeline.batch = plimsoll::parse_count(args.batch, "--batch", 1);
  pipeline.dtype = plimsoll::cli::for_option("--dtype", [&] { return plimsoll::parse_dtype(args.dtype); });
  pipeline.queue_depth = plimsoll::parse_count(args.queue, "--queue");
  pipeline.workers = plimsoll::parse_count(args.workers, "--workers");
  if (!args.budget.empty()) {
    pipeline.budget = plimsoll::cli::for_option("--budget", [&] { return plimsoll::parse_size(args.budget); });
  }
  return pipeline;
}

// What the budget allows, in one sentence; empty without a budget. A budget that holds no queue says what
// takes the room and what to change.
std::string budget_note(const plimsoll::BatchPipeline& pipeline, const plimsoll::BatchEstimate& estimate) {
  if (!pipeline.budget) return {};
  const std::uint64_t budget = *pipeline.budget;
  const std::string budget_text = format_size(budget);
  if (budget < estimate.batch_bytes) {
    return fmt::format("the budget {} is smaller than one batch ({}): no queue fits; lower --batch or the shape, "
                       "or raise --budget",
                       budget_text, format_size(estimate.batch_bytes));
  }
  // Cannot overflow: estimate_batch checked the larger total_bytes.
  const std::uint64_t fixed_bytes = estimate.in_flight_bytes + estimate.consumer_bytes;
  if (!*estimate.budget_fits_pipeline) {
    return fmt::format("the budget {} cannot hold even the {} batches being built and the consumer's ({}): no "
                       "queue fits; lower --workers or --batch, or raise --budget",
                       budget_text, pipeline.workers, format_size(fixed_bytes));
  }
  if (*estimate.max_queue_for_budget == 0) {
    return fmt::format("the budget {} holds the {} batches being built and the consumer's ({}) but no queued "
                       "batch ({} each): no queue fits; lower --workers or --batch, or raise --budget",
                       budget_text, pipeline.workers, format_size(fixed_bytes), format_size(estimate.batch_bytes));
  }
  const bool queue_fits = pipeline.queue_depth <= *estimate.max_queue_for_budget;
  return fmt::format("the budget {} holds a queue of up to {} batches next to the {} being built and the "
                     "consumer's; --queue {} {}",
                     budget_text, *estimate.max_queue_for_budget, pipeline.workers, pipeline.queue_depth,
                     queue_fits ? "fits" : "does not fit");
}

void print_batch_json(const plimsoll::BatchPipeline& pipeline, const plimsoll::BatchEstimate& estimate) {
  fmt::print("{}\n", plimsoll::telemetry::batch_estimate_json(pipeline, estimate, budget_note(pipeline, estimate)));
}

void print_batch_table(const plimsoll::BatchPipeline& pipeline, const plimsoll::BatchEstimate& estimate) {
  fmt::print("{} {} x {} samples: {} per batch\n\n", pipeline.sample.to_string(), plimsoll::to_string(pipeline.dtype),
             pipeline.batch, format_size(estimate.batch_bytes));
  plimsoll::cli::Table table(
      {{"held by"}, {"batches", Align::right}, {"bytes", Align::right}, {"size", Align::right}});
  const auto add = [&](const std::string& who, std::uint64_t batches, std::uint64_t bytes) {
    table.add_row({who, fmt::format("{}", batches), fmt::format("{}", bytes), format_size(bytes)});
  };
  add(fmt::format("queue (depth {})", pipeline.queue_depth), pipeline.queue_depth, estimate.queue_bytes);
  add(fmt::format("in flight ({} workers)", pipeline.workers), pipeline.workers, estimate.in_flight_bytes);
  add("consumer", 1, estimate.consumer_bytes);
  // The sum of the batch counts cannot overflow: total_bytes, their product with batch_bytes >= 1, did not.
  add("total", pipeline.queue_depth + pipeline.workers + 1, estimate.total_bytes);
  fmt::print("{}", table.render());
  const std::string note = budget_note(pipeline, estimate);
  if (!note.empty()) fmt::print("\n{}\n", note);
}

void run_batch(const BatchArgs& args) {
  const plimsoll::BatchPipeline pipeline = pipeline_from(args);
  const plimsoll::BatchEstimate estimate = plimsoll::estimate_batch(pipeline);
  if (args.json) {
    print_batch_json(pipeline, estimate);
  } else {
    print_batch_table(pipeline, estimate);
  }
}

double to_gib(std::uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0); }

// Three significant digits without an exponent: the cells span 0.0000916 GiB to hundreds of GiB.
std::string format_gib(std::uint64_t bytes) {
  if (bytes == 0) return "0";  // log10 needs a positive number; no cell is empty, but keep this total
  const double gib = to_gib(bytes);
  const int magnitude = static_cast<int>(std::floor(std::log10(gib)));
  const int decimals = magnitude >= 2 ? 0 : 2 - magnitude;
  return fmt::format("{:.{}f}", gib, decimals);
}

void print_memory_json(const plimsoll::InputMemoryTable& table) {
  nlohmann::ordered_json out;
  out["dtype"] = std::string(plimsoll::to_string(table.dtype));
  out["dtype_bytes"] = plimsoll::dtype_bytes(table.dtype);
  out["channels"] = table.channels;
  out["resolutions"] = table.resolutions;
  out["batches"] = table.batches;
  out["bytes"] = table.bytes;
  nlohmann::ordered_json gib = nlohmann::ordered_json::array();
  for (const std::vector<std::uint64_t>& row : table.bytes) {
    nlohmann::ordered_json gib_row = nlohmann::ordered_json::array();
    for (std::uint64_t bytes : row) gib_row.push_back(to_gib(bytes));
    gib.push_back(std::move(gib_row));
  }
  out["gib"] = std::move(gib);
  fmt::print("{}\n", out.dump());
}

void print_memory_table(const plimsoll::InputMemoryTable& memory) {
  fmt::print("input memory in GiB: resolution x resolution x {} channels x batch x {} bytes ({}); rows are "
             "resolutions, columns batch sizes\n\n",
             memory.channels, plimsoll::dtype_bytes(memory.dtype), plimsoll::to_string(memory.dtype));
  std::vector<plimsoll::cli::Table::Column> columns{{"resolution"}};
  for (std::uint64_t batch : memory.batches) columns.push_back({fmt::format("{}", batch), Align::right});
  plimsoll::cli::Table table(std::move(columns));
  for (std::size_t r = 0; r < memory.resolutions.size(); ++r) {
    std::vector<std::string> cells{fmt::format("{0}x{0}", memory.resolutions[r])};
    for (std::uint64_t bytes : memory.bytes[r]) cells.push_back(format_gib(bytes));
    table.add_row(std::move(cells));
  }
  fmt::print("{}", table.render());
}

void run_table(const TableArgs& args) {
  const plimsoll::DType dtype =
      plimsoll::cli::for_option("--dtype", [&] { return plimsoll::parse_dtype(args.dtype); });
  const std::uint64_t channels = plimsoll::parse_count(args.channels, "--channels", 1);
  const plimsoll::InputMemoryTable table = plimsoll::input_memory_table(dtype, channels);
  if (args.json) {
    print_memory_json(table);
  } else {
    print_memory_table(table);
  }
}

constexpr const char* kDTypeHelp = "Element type: float32 (fp32), float16 (fp16), bfloat16 (bf16), uint8, int64";

void add_batch_subcommand(CLI::App& estimate) {
  auto args = std::make_shared<BatchArgs>();
  CLI::App* batch = estimate.add_subcommand(
      "batch", "Memory of one input batch, the prefetch queue, the batches workers are building, and the deepest "
               "queue a budget allows");
  batch->add_option("--shape", args->shape, "Shape of one sample, dimensions joined by 'x', e.g. 224x224x3")
      ->type_name("SHAPE")
      ->required();
  batch->add_option("--batch", args->batch, "Samples per batch (at least 1)")->type_name("N")->required();
  batch->add_option("--dtype", args->dtype, kDTypeHelp)->type_name("DTYPE")->capture_default_str();
  batch->add_option("--queue", args->queue, "Finished batches waiting in the prefetch queue")
      ->type_name("N")
      ->capture_default_str();
  batch->add_option("--workers", args->workers, "Workers, each building one batch")
      ->type_name("N")
      ->capture_default_str();
  batch->add_option("--budget", args->budget, "Memory the pipeline may hold, e.g. 8GiB: reports the deepest queue "
                                              "that fits")
      ->type_name("SIZE");
  batch->add_flag("--json", args->json, "One JSON object (keys in docs/estimate.md)");
  batch->callback([args] { run_batch(*args); });
}

void add_table_subcommand(CLI::App& estimate) {
  auto args = std::make_shared<TableArgs>();
  CLI::App* table = estimate.add_subcommand(
      "table", "Input memory in GiB of square images, resolutions 32 to 1024 by batch sizes 32 to 65536");
  table->add_option("--dtype", args->dtype, kDTypeHelp)->type_name("DTYPE")->capture_default_str();
  table->add_option("--channels", args->channels, "Channels per pixel (at least 1)")
      ->type_name("N")
      ->capture_default_str();
  table->add_flag("--json", args->json, "One JSON object: resolutions, batches, bytes and gib matrices");
  table->callback([args] { run_table(*args); });
}

}  // namespace

void add_estimate_command(CLI::App& app) {
  CLI::App* estimate =
      app.add_subcommand("estimate", "Work out the memory of input batches before a run (docs/estimate.md)");
  estimate->require_subcommand(1);
  add_batch_subcommand(*estimate);
  add_table_subcommand(*estimate);
}
