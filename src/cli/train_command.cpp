// `plimsoll train`: the main job (src/train/train_job.hpp, docs/train.md). Parses the options, runs the job, and
// prints what memory it used: per device and tag, the input pipeline, and the leak watch's verdict. Without
// libtorch at build time the command exists and says how to get it.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "cli/option_values.hpp"
#include "plimsoll/datasets.hpp"
#include "plimsoll/device.hpp"
#include "plimsoll/error.hpp"
#include "plimsoll/estimate.hpp"
#include "plimsoll/policy.hpp"
#include "plimsoll/size.hpp"

#ifdef PLIMSOLL_HAVE_TRAIN
#include "cli/leak_text.hpp"
#include "cli/output.hpp"
#include "train/launcher.hpp"
#include "train/rank_report.hpp"
#include "train/replica.hpp"
#include "train/train_job.hpp"
#endif

namespace {

// Exit status of a run that ran out of memory (2 is bad input, 1 an internal error); of a rank that stopped because
// another rank failed or vanished (train/launcher.hpp).
constexpr int kExitOutOfMemory = 3;
// 88% test accuracy in under a minute on one core (docs/train.md).
constexpr std::uint64_t kDefaultEpochs = 2;
// --leak-demo without --epochs and --limit-batches: one epoch of 40 steps, enough for the leak watch and short
// enough to watch.
constexpr std::uint64_t kLeakDemoBatches = 40;
constexpr std::size_t kShownLeakGroups = 3;

struct TrainArgs {
  std::string data;
  std::optional<std::uint64_t> epochs;
  std::optional<std::uint64_t> limit_batches;
  std::size_t batch_size = 128;
  double learning_rate = 1e-3;
  std::uint64_t seed = 2026;
  std::string device = "cpu";
  std::size_t devices = 1;
  std::string policy;
  std::string memory_limit;
  std::optional<std::uint64_t> memory_limit_bytes;  // --memory-limit parsed by read_numbers()
  std::size_t threads = 0;
  std::size_t workers = 1;
  std::string record;
  std::string html;
  bool json = false;
  bool leak_demo = false;
  bool quiet = false;
  // Data parallelism over processes.
  std::size_t nproc = 0;
  std::optional<int> rank;
  std::optional<int> world_size;
  std::string master;  // HOST:PORT
  double timeout_seconds = 60;
  bool verify_replicas = false;
  // Model parallelism.
  std::size_t model_parallel = 1;
  std::optional<std::size_t> micro_batches;  // none: plimsoll::train::kDefaultMicroBatches
  // The numeric options as given; read_numbers() parses them into the fields above, so that a bad one (0, -1,
  // "two") is bad input like any other (exit status 2, a message naming the option and the fix).
  // CLI11 converts a negative number into an unsigned field by wrapping it (--seed -1 became 2^64 - 1), and takes
  // one into an int (--rank -1), so every whole number goes through plimsoll::parse_count.
  struct {
    std::optional<std::string> epochs, limit_batches, nproc, world_size, threads, rank, micro_batches;
    std::string seed = "2026";
    std::string model_parallel = "1";
    std::string batch_size = "128";
    std::string devices = "1";
    std::string workers = "1";
    std::string timeout = "60";
  } given;
};

// The largest --world-size taken: a rank is an int, and no job comes near it.
constexpr std::uint64_t kMaxWorldSize = 65535;
// The most --threads taken: libtorch takes an int, and no machine comes near it.
constexpr std::uint64_t kMaxThreads = 4096;
// --timeout's range in seconds: a collective needs some time, and a day is more than any step waits.
constexpr plimsoll::cli::NumberRange kTimeoutSeconds{.minimum = 0, .minimum_excluded = true, .maximum = 86400};

void read_numbers(TrainArgs& args) {
  const auto count = [](const std::string& text, const char* option) { return plimsoll::parse_count(text, option, 1); };
  if (args.given.epochs) args.epochs = count(*args.given.epochs, "--epochs");
  if (args.given.limit_batches) args.limit_batches = count(*args.given.limit_batches, "--limit-batches");
  args.batch_size = count(args.given.batch_size, "--batch-size");
  if (args.given.nproc) args.nproc = count(*args.given.nproc, "--nproc");
  if (args.given.world_size) {
    const std::uint64_t world = count(*args.given.world_size, "--world-size");
    if (world > kMaxWorldSize) {
      throw plimsoll::InvalidArgument(
          fmt::format("--world-size {}: give at most {} processes", world, kMaxWorldSize));
    }
    args.world_size = static_cast<int>(world);
  }
  if (args.given.threads) {
    args.threads = count(*args.given.threads, "--threads");
    if (args.threads > kMaxThreads) {
      throw plimsoll::InvalidArgument(fmt::format("--threads {}: give at most {} threads", args.threads, kMaxThreads));
    }
  }
  args.devices = count(args.given.devices, "--devices");  // the job refuses more than it splits into
  args.seed = plimsoll::parse_count(args.given.seed, "--seed");
  if (args.given.rank) {
    const std::uint64_t rank = plimsoll::parse_count(*args.given.rank, "--rank");
    if (rank >= kMaxWorldSize) {
      throw plimsoll::InvalidArgument(fmt::format(
          "--rank {}: give a rank below the job's --world-size (at most {} processes)", rank, kMaxWorldSize));
    }
    args.rank = static_cast<int>(rank);
  }
  // 0 goes on to the job's own checks, whose messages say what these options take.
  args.model_parallel = plimsoll::parse_count(args.given.model_parallel, "--model-parallel");
  if (args.given.micro_batches) args.micro_batches = plimsoll::parse_count(*args.given.micro_batches, "--micro-batches");
  args.workers = plimsoll::parse_count(args.given.workers, "--workers");
  args.timeout_seconds = plimsoll::cli::parse_number(args.given.timeout, "--timeout", kTimeoutSeconds);
  // Checked in every build, so that a name or size that does not parse says which option gave it (the job checks
  // the device's kind).
  plimsoll::cli::for_option("--device", [&] { return plimsoll::DeviceName::parse(args.device); });
  if (!args.memory_limit.empty()) {
    args.memory_limit_bytes =
        plimsoll::cli::for_option("--memory-limit", [&] { return plimsoll::parse_size(args.memory_limit); });
  }
}

#ifdef PLIMSOLL_HAVE_TRAIN

using plimsoll::format_size;
using plimsoll::train::TrainReport;

plimsoll::train::TrainOptions job_options(const TrainArgs& args) {
  plimsoll::train::TrainOptions o;
  o.data_dir = args.data;
  o.epochs = args.epochs.value_or(args.leak_demo ? 1 : kDefaultEpochs);
  o.limit_batches = args.limit_batches.value_or(args.leak_demo ? kLeakDemoBatches : 0);
  o.batch_size = args.batch_size;
  o.learning_rate = args.learning_rate;
  o.seed = args.seed;
  o.device = args.device;
  o.devices = args.devices;
  if (!args.policy.empty()) o.growth = plimsoll::parse_growth(args.policy);
  if (args.memory_limit_bytes) o.memory_limit = *args.memory_limit_bytes;
  o.threads = args.threads;
  o.loader_workers = args.workers;
  o.record_path = args.record;
  o.html_path = args.html;
  o.leak_demo = args.leak_demo;
  o.progress = !args.quiet;
  o.verify_replicas = args.verify_replicas;
  o.model_parallel = args.model_parallel;
  if (args.micro_batches == std::size_t{0}) {
    throw plimsoll::InvalidArgument("--micro-batches 0: give at least 1 (each step is split into that many)");
  }
  o.micro_batches = args.micro_batches.value_or(0);
  return o;
}

std::optional<std::string> environment(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

int environment_int(const char* name, const std::string& value) {
  try {
    std::size_t used = 0;
    const int parsed = std::stoi(value, &used);
    if (used == value.size()) return parsed;
  } catch (const std::exception&) {
  }
  throw plimsoll::InvalidArgument(fmt::format("{}={}: give a whole number", name, value));
}

// This process's place in a multi-process job, from the flags or else from the variables torchrun sets (RANK,
// WORLD_SIZE, MASTER_ADDR, MASTER_PORT); nothing when it trains alone.
std::optional<plimsoll::train::ProcessGroupOptions> distributed_of(const TrainArgs& args) {
  const auto env_rank = environment("RANK");
  const auto env_world = environment("WORLD_SIZE");
  const int world = args.world_size ? *args.world_size : env_world ? environment_int("WORLD_SIZE", *env_world) : 1;
  if (world <= 1 && !args.rank) return std::nullopt;
  plimsoll::train::ProcessGroupOptions d;
  d.world_size = world;
  d.rank = args.rank ? *args.rank : env_rank ? environment_int("RANK", *env_rank) : -1;
  if (d.rank < 0) {
    throw plimsoll::InvalidArgument(fmt::format("a job of {} processes needs this process's rank: give --rank R "
                                                "(or set RANK), 0 <= R < {}", world, world));
  }
  std::string master = args.master;
  if (master.empty()) {
    const auto addr = environment("MASTER_ADDR");
    const auto port = environment("MASTER_PORT");
    if (!addr || !port) {
      throw plimsoll::InvalidArgument("a job of several processes needs rank 0's address: give --master HOST:PORT "
                                      "(or set MASTER_ADDR and MASTER_PORT), the same on every rank");
    }
    master = *addr + ":" + *port;
  }
  const auto colon = master.rfind(':');
  const int port = colon == std::string::npos ? -1 : environment_int("--master's port", master.substr(colon + 1));
  if (colon == 0 || port <= 0 || port > 65535) {
    throw plimsoll::InvalidArgument(fmt::format("--master {}: give HOST:PORT, e.g. 10.0.0.1:29500", master));
  }
  d.master_addr = master.substr(0, colon);
  d.master_port = static_cast<std::uint16_t>(port);
  d.timeout = std::chrono::milliseconds(static_cast<long long>(args.timeout_seconds * 1000));
  return d;
}

// The name of a retained group's tag: "" when untagged.
std::string tag_of(const plimsoll::telemetry::LeakGroup& group, const TrainReport& report) {
  return group.tag < report.trace.tags.size() ? report.trace.tags[group.tag] : "";
}

nlohmann::ordered_json json_report(const TrainReport& report) {
  nlohmann::ordered_json out;
  out["test_accuracy"] = report.test_accuracy;
  out["peak_in_use_bytes"] = report.peak_in_use_bytes();
  out["peak_reserved_bytes"] = report.peak_reserved_bytes();
  out["allocator_overridden"] = !report.allocator_warning.empty();
  out["leak"] = report.leaks.leak();
  out["leak_verdict"] = plimsoll::telemetry::to_string(report.leaks.verdict);
  out["leak_bytes_per_step"] = report.leaks.bytes_per_step;
  out["oom"] = false;
  out["epochs"] = report.epochs.size();
  out["steps"] = report.steps;
  out["seconds"] = report.seconds;
  out["step_seconds"] = report.step_seconds;
  out["parameters"] = report.parameters;
  nlohmann::ordered_json epochs = nlohmann::ordered_json::array();
  for (const auto& epoch : report.epochs) {
    epochs.push_back({{"epoch", epoch.epoch},
                      {"steps", epoch.steps},
                      {"train_loss", epoch.train_loss},
                      {"train_accuracy", epoch.train_accuracy},
                      {"test_loss", epoch.test_loss},
                      {"test_accuracy", epoch.test_accuracy},
                      {"seconds", epoch.seconds}});
  }
  out["epoch_results"] = std::move(epochs);
  nlohmann::ordered_json devices = nlohmann::ordered_json::array();
  for (const auto& device : report.devices) {
    nlohmann::ordered_json tags = nlohmann::ordered_json::array();
    for (const auto& tag : device.stats.tags) {
      tags.push_back({{"tag", tag.tag},
                      {"in_use_bytes", tag.in_use_bytes},
                      {"peak_in_use_bytes", tag.peak_in_use_bytes},
                      {"allocations", tag.allocations}});
    }
    devices.push_back({{"device", device.name},
                       {"limit_bytes", device.limit_bytes},
                       {"in_use_bytes", device.stats.in_use_bytes},
                       {"peak_in_use_bytes", device.stats.peak_in_use_bytes},
                       {"reserved_bytes", device.stats.reserved_bytes},
                       {"peak_reserved_bytes", device.stats.peak_reserved_bytes},
                       {"maps", device.stats.maps},
                       {"unmaps", device.stats.unmaps},
                       {"tags", std::move(tags)}});
  }
  out["devices"] = std::move(devices);
  out["loader"] = {{"peak_bytes_held", report.loader.peak_bytes_held},
                   {"byte_budget", report.loader.byte_budget},
                   {"buffers_allocated", report.loader.buffers_allocated}};
  nlohmann::ordered_json groups = nlohmann::ordered_json::array();
  for (const auto& group : report.leaks.groups) {
    groups.push_back({{"bytes", group.bytes},
                      {"allocations", group.allocations},
                      {"tag", tag_of(group, report)},
                      {"where", plimsoll::cli::where_made(group, report.trace)}});
  }
  out["leak_groups"] = std::move(groups);
  if (report.model_parallel > 1) {
    out["model_parallel"] = {{"stages", report.model_parallel},
                             {"micro_batches", report.micro_batches},
                             {"stage_busy_seconds", report.stage_busy_seconds}};
  }
  if (!report.ranks.empty()) {
    nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
    for (const auto& rank : report.ranks) {
      ranks.push_back(nlohmann::ordered_json::parse(plimsoll::train::rank_report_json(rank)));
    }
    out["ranks"] = std::move(ranks);
  }
  out["trace"] = report.trace_path.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(report.trace_path);
  out["html"] = report.html_path.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(report.html_path);
  return out;
}

void print_memory(const TrainReport& report) {
  plimsoll::cli::Table table = plimsoll::cli::memory_table();
  for (const auto& device : report.devices) {
    for (const auto& tag : device.stats.tags) {
      table.add_row({device.name, tag.tag.empty() ? "untagged" : tag.tag, format_size(tag.in_use_bytes),
                     format_size(tag.peak_in_use_bytes), "", "", ""});
    }
    // Reserved memory belongs to the device, not to a tag: mapped granules hold blocks of every tag.
    table.add_row({device.name, "all", format_size(device.stats.in_use_bytes),
                   format_size(device.stats.peak_in_use_bytes), format_size(device.stats.reserved_bytes),
                   format_size(device.stats.peak_reserved_bytes), format_size(device.limit_bytes)});
  }
  fmt::print("\nmemory after the last step (peaks over the run):\n{}", table.render());
  fmt::print("input pipeline: peak {} held of a {} budget, {} batch buffers allocated (then recycled)\n",
             format_size(report.loader.peak_bytes_held), format_size(report.loader.byte_budget),
             report.loader.buffers_allocated);
}

void print_stages(const TrainReport& report) {
  if (report.model_parallel < 2) return;
  // What each stage computed against the steps' wall time: more than the wall time in all means they overlapped.
  std::string busy;
  for (std::size_t s = 0; s < report.stage_busy_seconds.size(); ++s) {
    busy += fmt::format("{}stage {} {:.2f} s", s == 0 ? "" : ", ", s, report.stage_busy_seconds[s]);
  }
  fmt::print("model parallel: {} stages, one per device above (stage 0 the first conv block, stage 1 the "
             "rest), {} micro-batches per step; computing: {} in {:.2f} s of training steps\n",
             report.model_parallel, report.micro_batches, busy, report.step_seconds);
}

void print_ranks(const TrainReport& report) {
  if (report.ranks.empty()) return;
  using Align = plimsoll::cli::Table::Align;
  plimsoll::cli::Table table({{"rank", Align::right},
                              {"host", Align::left},
                              {"pid", Align::right},
                              {"device", Align::left},
                              {"peak in use", Align::right},
                              {"peak reserved", Align::right},
                              {"limit", Align::right},
                              {"leak watch", Align::left}});
  for (const auto& rank : report.ranks) {
    table.add_row({std::to_string(rank.rank), rank.host, std::to_string(rank.pid), rank.device,
                   format_size(rank.peak_in_use_bytes), format_size(rank.peak_reserved_bytes),
                   format_size(rank.limit_bytes),
                   rank.leak ? fmt::format("leak, {}/step", format_size(static_cast<std::uint64_t>(
                                                                rank.leak_bytes_per_step)))
                             : rank.leak_verdict});
  }
  fmt::print("\nevery rank ({} processes; the table above is rank 0's):\n{}", report.ranks.size(), table.render());
}

void print_leaks(const TrainReport& report) {
  if (!report.allocator_warning.empty()) fmt::print("\n{}\n", report.allocator_warning);
  fmt::print("\nleak watch: {}\n", plimsoll::cli::leak_verdict_line(report.leaks));
  if (!report.leaks.leak()) return;
  for (std::size_t i = 0; i < report.leaks.groups.size() && i < kShownLeakGroups; ++i) {
    const auto& group = report.leaks.groups[i];
    fmt::print("  {} in {} allocations (tag {}), made at {}\n", format_size(group.bytes), group.allocations,
               group.tag == 0 ? "-" : tag_of(group, report),
               plimsoll::cli::where_made(group, report.trace));
  }
}

void print_human(const TrainReport& report) {
  const auto& last = report.epochs.back();
  fmt::print("test accuracy {:.2f}% after {} epochs ({} steps, {:.1f} s; {} parameters; last epoch's train loss "
             "{:.3f})\n",
             100 * report.test_accuracy, report.epochs.size(), report.steps, report.seconds, report.parameters,
             last.train_loss);
  print_memory(report);
  print_stages(report);
  print_ranks(report);
  print_leaks(report);
  if (!report.trace_path.empty()) fmt::print("trace: {} (plimsoll replay / leaks read it)\n", report.trace_path);
  if (!report.html_path.empty()) fmt::print("timeline: {}\n", report.html_path);
}

// `--nproc N` in the command the user typed: start N ranks of this same command and wait for them.
void launch(const TrainArgs& args) {
  if (args.rank || args.world_size || environment("RANK") || environment("WORLD_SIZE")) {
    throw plimsoll::InvalidArgument("--nproc starts its own ranks on this machine; to start each rank yourself (as "
                                    "on several machines) drop --nproc and give --rank, --world-size and --master "
                                    "(or RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)");
  }
  // Bad options fail here, once, rather than in every rank.
  plimsoll::train::TrainOptions checked = job_options(args);
  checked.distributed = plimsoll::train::ProcessGroupOptions{.rank = 0, .world_size = static_cast<int>(args.nproc)};
  plimsoll::train::validate(checked);
  plimsoll::train::LaunchOptions launch;
  launch.processes = static_cast<int>(args.nproc);
  launch.command = plimsoll::train::own_command_line();
  launch.grace = std::chrono::milliseconds(static_cast<long long>(args.timeout_seconds * 1000) + 5000);
  launch.quiet = args.quiet;
  const int status = plimsoll::train::launch_ranks(launch);
  if (status != 0) throw CLI::RuntimeError(status);
}

void run_train(const TrainArgs& args) {
  if (args.nproc > 64) throw plimsoll::InvalidArgument(fmt::format("--nproc {}: give 1 to 64 processes", args.nproc));
  if (args.nproc > 1 && std::getenv(plimsoll::train::kLaunchedRankVariable) == nullptr) return launch(args);
  plimsoll::train::TrainOptions options = job_options(args);
  options.distributed = distributed_of(args);
  const int rank = options.distributed ? options.distributed->rank : 0;
  if (rank != 0) options.progress = false;  // rank 0 speaks for the job
  try {
    const TrainReport report = plimsoll::train::run_training(options);
    if (rank != 0) {
      if (!args.json) fmt::print("rank {} of {}: done; rank 0 prints the job's report\n", rank, report.world_size);
      return;
    }
    if (args.json) {
      fmt::print("{}\n", json_report(report).dump());
    } else {
      print_human(report);
    }
  } catch (const plimsoll::train::RankLost& lost) {
    std::fflush(stdout);
    fmt::print(stderr, "plimsoll train: rank {}: {}\n", rank, lost.what());
    throw CLI::RuntimeError(plimsoll::train::kExitStoppedByOtherRank);
  } catch (const plimsoll::train::TrainingOutOfMemory& oom) {
    std::fflush(stdout);
    fmt::print(stderr, "plimsoll train: {}out of memory; the device's report:\n{}\n",
               options.distributed ? fmt::format("rank {}: ", rank) : "", oom.what());
    if (args.json) {
      nlohmann::ordered_json out;
      out["oom"] = true;
      out["error"] = oom.what();
      fmt::print("{}\n", out.dump());
    }
    throw CLI::RuntimeError(kExitOutOfMemory);
  }
}

#else

void run_train(const TrainArgs&) {
  throw plimsoll::InvalidArgument(
      "this plimsoll was built without libtorch, which `plimsoll train` needs: run scripts/install-deps.sh (it "
      "installs Debian's libtorch-dev), then configure and build again (cmake -S . -B build && cmake --build build)");
}

#endif

}  // namespace

void add_train_command(CLI::App& app) {
  auto args = std::make_shared<TrainArgs>();
  CLI::App* train = app.add_subcommand(
      "train", "Train a convolutional network on Fashion-MNIST with libtorch on the CPU, every tensor in a plimsoll "
               "device; report memory per device and tag, and the leak watch's verdict");
  train->add_option("--data", args->data, "Folder with Fashion-MNIST's IDX files")
      ->default_str(plimsoll::default_fashion_mnist_dir().string());
  train->add_option("--epochs", args->given.epochs, "Passes over the training set (default 2; the leak demo's 1)")
      ->type_name("N");
  train->add_option("--limit-batches", args->given.limit_batches,
                    "Train on at most N batches per epoch (short runs; the leak demo's default is 40)")
      ->type_name("N");
  train->add_option("--batch-size", args->given.batch_size, "Samples per step, split between --devices")
      ->capture_default_str()->type_name("N");
  train->add_option("--lr", args->learning_rate, "Adam's learning rate")->capture_default_str();
  train->add_option("--seed", args->given.seed, "Initial weights, shuffling and augmentation")
      ->capture_default_str()
      ->type_name("N");
  train->add_option("--device", args->device, "Host device to train on: cpu, or cpu/K of a configured split")
      ->capture_default_str();
  train->add_option("--devices", args->given.devices,
                    "Split --device into N logical devices and train data-parallel, one replica on each (each "
                    "within its own limit)")
      ->capture_default_str()->type_name("N");
  train->add_option("--policy", args->policy, "Growth policy: preallocate or on_demand (default: the config's)")
      ->check(CLI::IsMember({"preallocate", "on_demand"}));
  train->add_option("--memory-limit", args->memory_limit,
                    "Limit of each training device, e.g. 64MiB; too low ends with plimsoll's out-of-memory report "
                    "and exit status 3");
  train->add_option("--threads", args->given.threads, "libtorch's compute threads in all (default: one per replica)")
      ->type_name("N");
  train->add_option("--workers", args->given.workers, "Input pipeline workers")->capture_default_str()->type_name("N");
  train->add_option("--record", args->record, "Keep the run's allocation trace in FILE (with call sites)")
      ->type_name("FILE");
  train->add_option("--html", args->html, "Write the run's memory timeline as one HTML file")
      ->type_name("FILE.html");
  train->add_flag("--json", args->json, "End with one JSON object instead of the report (keys in docs/train.md)");
  train->add_flag("--leak-demo", args->leak_demo,
                  "Plant the Keras bug of a data generator that keeps every batch, and let the leak watch find it");
  train->add_flag("--quiet", args->quiet, "No progress on stderr");
  train->add_option("--nproc", args->given.nproc,
                    "Train data-parallel in N processes on this machine (c10d over Gloo on the loopback address), each "
                    "with its own device and --memory-limit; rank 0 prints every rank's memory")
      ->type_name("N");
  train->add_option("--rank", args->given.rank, "This process's rank in a job started by hand (default: $RANK)")
      ->type_name("R");
  train->add_option("--world-size", args->given.world_size, "Processes in the job (default: $WORLD_SIZE)")
      ->type_name("N");
  train->add_option("--master", args->master, "Rank 0's address, HOST:PORT (default: $MASTER_ADDR:$MASTER_PORT)");
  train->add_option("--timeout", args->given.timeout,
                    "Seconds a rank waits for the others (joining, each collective) before it gives up, up to a day")
      ->capture_default_str()->type_name("SECONDS");
  train->add_flag("--verify-replicas", args->verify_replicas,
                  "After every step, check that every rank holds bitwise-equal weights (an all-gather of a hash)");
  train->add_option("--model-parallel", args->given.model_parallel,
                    "Split the network into 2 stages on the logical devices cpu/0 and cpu/1 (each with its own "
                    "--memory-limit), micro-batches pipelined between them")
      ->capture_default_str()
      ->type_name("N");
  train->add_option("--micro-batches", args->given.micro_batches,
                    "Micro-batches per step with --model-parallel (default 4)")
      ->type_name("N");
  train->callback([args] {
    read_numbers(*args);
    run_train(*args);
  });
}
