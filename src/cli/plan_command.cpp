// `plimsoll plan TRACE...`: the peak memory of a training step at any batch size, and the largest batch a device
// holds, predicted from recordings at a few batch sizes (the planner is src/plan; docs/plan.md).
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/option_values.hpp"
#include "plan/plan_chart.hpp"
#include "plan/plan_report.hpp"
#include "plimsoll/error.hpp"
#include "plimsoll/estimate.hpp"
#include "plimsoll/plan.hpp"
#include "plimsoll/trace.hpp"
#include "telemetry/terminal/output_file.hpp"

namespace {

struct PlanArgs {
  std::vector<std::string> traces;
  std::string device = "sim:16GiB";
  std::string batch;  // checked by plimsoll::parse_count; not given: the largest recorded
  bool fit = false;
  std::string margin = "0";  // a share of the device in [0, 1), checked by cli::parse_number
  std::vector<std::string> allocators{"plimsoll", "pytorch", "tensorflow"};
  std::vector<std::string> batch_of;
  bool json = false;
  std::string html;
  CLI::Option* batch_option = nullptr;  // given or not (CLI11 fills it after parsing): an empty --batch is an error
};

// --margin's range: a share of the device kept free; all of it would leave nothing to fit.
constexpr plimsoll::cli::NumberRange kMarginShare{.minimum = 0, .maximum = 1, .maximum_excluded = true};

// --batch-of TRACE=N, by the path as given.
std::map<std::string, std::uint64_t> parse_batch_of(const std::vector<std::string>& entries) {
  std::map<std::string, std::uint64_t> batches;
  for (const std::string& entry : entries) {
    const std::size_t equals = entry.rfind('=');
    std::uint64_t batch = 0;
    const char* first = entry.data() + (equals == std::string::npos ? 0 : equals + 1);
    const char* last = entry.data() + entry.size();
    const auto [end, error] = std::from_chars(first, last, batch);
    if (equals == std::string::npos || equals == 0 || error != std::errc{} || end != last || batch == 0) {
      throw plimsoll::InvalidArgument(
          fmt::format("--batch-of {}: expected TRACE=N with N a batch size of at least 1, e.g. --batch-of b16.trace=16",
                      entry));
    }
    batches[entry.substr(0, equals)] = batch;
  }
  return batches;
}

void run_plan(const PlanArgs& args) {
  const std::uint64_t asked_batch =
      args.batch_option->count() > 0 ? plimsoll::parse_count(args.batch, "--batch", 1) : 0;
  const double margin = plimsoll::cli::parse_number(args.margin, "--margin", kMarginShare);
  if (!args.html.empty()) plimsoll::telemetry::check_writable(args.html, "--html");
  const std::uint64_t device_bytes = plimsoll::plan_device_bytes(args.device);
  std::vector<plimsoll::PlanAllocator> allocators;
  for (const std::string& name : args.allocators) {
    allocators.push_back(
        plimsoll::cli::for_option("--allocator", [&] { return plimsoll::parse_plan_allocator(name); }));
  }
  std::map<std::string, std::uint64_t> batch_of = parse_batch_of(args.batch_of);

  std::vector<plimsoll::RecordedJob> recordings;
  for (const std::string& path : args.traces) {
    plimsoll::RecordedJob job{.trace = plimsoll::read_trace(path)};
    if (const auto given = batch_of.find(path); given != batch_of.end()) {
      job.batch = given->second;
      batch_of.erase(given);
    }
    recordings.push_back(std::move(job));
  }
  if (!batch_of.empty()) {
    throw plimsoll::InvalidArgument(fmt::format("--batch-of {}: no such trace among those given; name it exactly as "
                                                "on the command line",
                                                batch_of.begin()->first));
  }
  const plimsoll::StepModel model = plimsoll::StepModel::build(std::move(recordings));

  std::uint64_t chart_up_to = 0;
  if (args.fit) {
    const auto results = plimsoll::largest_batch(model, device_bytes, margin, allocators);
    if (args.json) {
      fmt::print("{}\n", plimsoll::plan::largest_batch_json(model, device_bytes, margin, results).dump());
    } else {
      fmt::print("{}", plimsoll::plan::largest_batch_text(model, device_bytes, margin, results));
    }
    for (const auto& result : results) chart_up_to = std::max(chart_up_to, result.largest_batch + 1);
  } else {
    const std::uint64_t batch = asked_batch != 0 ? asked_batch : model.batches().back();
    const plimsoll::Prediction prediction = plimsoll::predict(model, batch, device_bytes, allocators);
    if (args.json) {
      fmt::print("{}\n", plimsoll::plan::prediction_json(model, prediction).dump());
    } else {
      fmt::print("{}", plimsoll::plan::prediction_text(model, prediction));
    }
    chart_up_to = batch;
  }
  if (!args.html.empty()) {
    chart_up_to = std::max(chart_up_to + chart_up_to / 4, model.batches().back());
    plimsoll::telemetry::write_output_file(
        args.html, plimsoll::plan::plan_chart_html(model, device_bytes, allocators, chart_up_to), "--html");
    if (!args.json) fmt::print("\nchart: {}\n", args.html);
  }
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto args = std::make_shared<PlanArgs>();
  CLI::App* plan = app.add_subcommand(
      "plan", "Predict a training step's peak memory at any batch size, and the largest batch a device holds, from "
              "recordings at a few batch sizes (docs/plan.md)");
  plan->add_option("traces", args->traces,
                   "Recordings of a few training steps of one job at two or more batch sizes (one is enough for its "
                   "own batch size); any format plimsoll reads, with step markers")
      ->required();
  plan->add_option("--device", args->device, "The device: sim:SIZE, a size (16GiB), or cuda:N (needs a driver)")
      ->capture_default_str();
  CLI::Option* batch = args->batch_option =
      plan->add_option("--batch", args->batch, "The batch size to predict, at least 1 (default: the largest recorded)")
          ->type_name("N");
  CLI::Option* fit =
      plan->add_flag("--fit", args->fit, "Find the largest batch size that fits under each allocator")->excludes(batch);
  plan->add_option("--margin", args->margin,
                   "With --fit: the share of the device kept free, in [0, 1) (e.g. 0.05 for 5%)")
      ->capture_default_str()
      ->type_name("SHARE")
      ->needs(fit);
  plan->add_option("--allocator", args->allocators,
                   "Allocators to replay under, comma-separated: plimsoll, pytorch, tensorflow")
      ->delimiter(',')
      ->allow_extra_args(false)
      ->capture_default_str();
  plan->add_option("--batch-of", args->batch_of,
                   "TRACE=N: the batch size of a trace without a \"# model NAME batch N\" marker (repeatable)")
      ->allow_extra_args(false);
  plan->add_flag("--json", args->json, "One JSON object (docs/plan.md lists the keys) instead of the text report");
  plan->add_option("--html", args->html, "Write predicted peak against batch size per allocator, with the device's "
                                         "line, as one self-contained page")
      ->type_name("FILE.html");
  plan->callback([args] { run_plan(*args); });
}
