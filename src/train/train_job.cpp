// run_training (train_job.hpp): devices, replicas, the pipeline, the step loop, evaluation, and the recording read
// back by the leak watch.
#include "train/train_job.hpp"

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <system_error>
#include <thread>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "plimsoll/allocator.hpp"
#include "plimsoll/datasets.hpp"
#include "plimsoll/error.hpp"
#include "plimsoll/recording.hpp"
#include "plimsoll/runtime.hpp"
#include "plimsoll/size.hpp"
#include "plimsoll/torch.hpp"
#include "telemetry/terminal/output_file.hpp"
#include "telemetry/terminal/progress_bar.hpp"
#include "telemetry/replay/replay.hpp"
#include "telemetry/replay/timeline.hpp"
#include "telemetry/render/timeline_html.hpp"
#include "train/process_group.hpp"
#include "train/rank_report.hpp"
#include "train/replica.hpp"
#include "train/staged_replica.hpp"
#include "train/train_progress.hpp"

namespace plimsoll::train {
namespace {

// Fashion-MNIST's pixel mean and standard deviation (over the training set, pixels scaled to [0, 1]).
constexpr float kMean = 0.2860f, kStdDev = 0.3530f;
constexpr std::size_t kTestBatch = 200;
constexpr std::size_t kMaxDevices = 16;
// Light augmentation (flips, shifts of at most a pixel): two epochs are too few for the pipeline's default 4-pixel
// shifts to pay off.
constexpr AugmentOptions kAugment{.flip = true, .max_shift = 1};
constexpr std::size_t kQueuedBatches = 4;  // the loader's byte budget, in batches

void validate_model_parallel(const TrainOptions& o) {
  if (o.model_parallel != 1 && o.model_parallel != StagedReplica::kStages) {
    throw InvalidArgument(fmt::format("--model-parallel {}: the network splits into {} stages (the first conv block, "
                                      "then the rest); give --model-parallel {}, or 1 for no split",
                                      o.model_parallel, StagedReplica::kStages, StagedReplica::kStages));
  }
  if (o.model_parallel == 1) {
    if (o.micro_batches != 0) {
      throw InvalidArgument(fmt::format("--micro-batches {} without --model-parallel: micro-batches are what the "
                                        "pipeline of a model-parallel run passes between its stages; add "
                                        "--model-parallel {} or drop --micro-batches",
                                        o.micro_batches, StagedReplica::kStages));
    }
    return;
  }
  if (o.devices > 1) {
    throw InvalidArgument(fmt::format("--model-parallel {} with --devices {}: data and model parallelism together "
                                      "are not supported; give one of them",
                                      o.model_parallel, o.devices));
  }
  if (o.distributed) {
    throw InvalidArgument(fmt::format("--model-parallel {} in a job of {} processes: model parallelism runs in one "
                                      "process; drop --nproc (and --rank/--world-size, RANK/WORLD_SIZE), or drop "
                                      "--model-parallel",
                                      o.model_parallel, o.distributed->world_size));
  }
  const std::size_t micro = o.micro_batches == 0 ? kDefaultMicroBatches : o.micro_batches;
  if (micro > o.batch_size) {
    throw InvalidArgument(fmt::format("--micro-batches {} with --batch-size {}: every micro-batch needs at least one "
                                      "sample; give at most {} micro-batches or raise --batch-size",
                                      micro, o.batch_size, o.batch_size));
  }
}

}  // namespace

void validate(const TrainOptions& o) {
  if (o.epochs == 0) throw InvalidArgument("--epochs must be at least 1");
  if (o.batch_size == 0) throw InvalidArgument("--batch-size must be at least 1");
  if (o.devices == 0 || o.devices > kMaxDevices) {
    throw InvalidArgument(fmt::format("--devices {}: give 1 to {} logical devices", o.devices, kMaxDevices));
  }
  if (o.devices > o.batch_size) {
    throw InvalidArgument(fmt::format("--devices {} with --batch-size {}: every replica needs at least one sample "
                                      "of each batch; raise --batch-size or lower --devices",
                                      o.devices, o.batch_size));
  }
  if (!(o.learning_rate > 0)) throw InvalidArgument("--lr must be a positive number");
  validate_model_parallel(o);
  if (o.distributed) {
    const ProcessGroupOptions& d = *o.distributed;
    if (d.world_size < 1 || d.rank < 0 || d.rank >= d.world_size) {
      throw InvalidArgument(fmt::format("rank {} of a world of {}: give 0 <= rank < world size (--rank, "
                                        "--world-size, or RANK and WORLD_SIZE)", d.rank, d.world_size));
    }
    if (o.devices > 1) {
      throw InvalidArgument(fmt::format("--devices {} in a job of {} processes: each process trains one replica; use "
                                        "--nproc alone, or --devices alone", o.devices, d.world_size));
    }
    if (static_cast<std::size_t>(d.world_size) > o.batch_size) {
      throw InvalidArgument(fmt::format("{} ranks with --batch-size {}: every rank needs at least one sample of each "
                                        "batch; raise --batch-size", d.world_size, o.batch_size));
    }
  }
  const DeviceName name = DeviceName::parse(o.device);
  if (name.kind != DeviceKind::cpu) {
    throw InvalidArgument(fmt::format("--device {}: plimsoll train runs libtorch on the CPU (Debian's libtorch is "
                                      "built without CUDA), so it needs a host device: cpu (or cpu/K when the "
                                      "config splits the host)",
                                      o.device));
  }
  if (o.devices > 1 && name.logical >= 0) {
    throw InvalidArgument(fmt::format("--device {} with --devices {}: --devices splits a physical device; give "
                                      "--device cpu",
                                      o.device, o.devices));
  }
  if (o.model_parallel > 1 && name.logical >= 0) {
    throw InvalidArgument(fmt::format("--device {} with --model-parallel {}: the stages go on logical devices "
                                      "split from a physical one; give --device cpu",
                                      o.device, o.model_parallel));
  }
  if (!o.record_path.empty()) telemetry::check_writable(o.record_path, "--record");
  if (!o.html_path.empty()) telemetry::check_writable(o.html_path, "--html");
}

namespace {

// Logical devices split from --device: one per data-parallel replica, or one per model-parallel stage (the two
// cannot be combined), 1 for none.
std::size_t logical_device_count(const TrainOptions& o) { return std::max(o.devices, o.model_parallel); }

// The environment's config (PLIMSOLL_* variables, PLIMSOLL_CONFIG), with the command line on top.
Config job_config(const TrainOptions& o, int rank) {
  Config config = apply_environment(Config{});
  // Rank 0 speaks for a multi-process job: the other ranks' "created device" lines would only repeat its own.
  if (rank != 0) config.log_device_creation = false;
  Policy policy = config.policy_for(DeviceName::parse(o.device));
  if (o.growth) policy.growth = *o.growth;
  if (o.memory_limit) {
    policy.memory_limit = *o.memory_limit;
    policy.memory_fraction.reset();
  }
  policy.validate();
  config.device_policies[o.device] = policy;
  if (const std::size_t count = logical_device_count(o); count > 1) {
    // Each logical device gets the limit asked for, or an equal share of the host's (worked out by the runtime).
    const LogicalDeviceConfig each =
        o.memory_limit ? LogicalDeviceConfig::sized(*o.memory_limit) : LogicalDeviceConfig::equal();
    config.logical_devices[o.device] = std::vector<LogicalDeviceConfig>(count, each);
  }
  return config;
}

std::vector<std::string> replica_devices(const TrainOptions& o) {
  const std::size_t count = logical_device_count(o);
  if (count == 1) return {o.device};
  std::vector<std::string> names;
  for (std::size_t i = 0; i < count; ++i) names.push_back(fmt::format("{}/{}", o.device, i));
  return names;
}

// Every rank records its own trace: rank 0 at the path given, rank R beside it as NAME.rankR.EXT.
std::string rank_path(const std::string& path, int rank) {
  if (rank == 0 || path.empty()) return path;
  const std::filesystem::path p(path);
  return (p.parent_path() / fmt::format("{}.rank{}{}", p.stem().string(), rank, p.extension().string())).string();
}

// A test hook: PLIMSOLL_TRAIN_KILL_RANK_AT_STEP=R:S makes rank R kill itself with SIGKILL at step S, as a crash or
// the kernel's OOM killer would, to show how the other ranks and the launcher react.
void kill_if_asked(int rank, std::uint64_t step) {
  const char* asked = std::getenv("PLIMSOLL_TRAIN_KILL_RANK_AT_STEP");
  if (asked == nullptr) return;
  int kill_rank = -1;
  unsigned long long kill_step = 0;
  if (std::sscanf(asked, "%d:%llu", &kill_rank, &kill_step) == 2 && kill_rank == rank && kill_step == step) {
    std::fflush(stderr);
    std::raise(SIGKILL);
  }
}

std::string host_name() {
  char name[256] = {};
  return ::gethostname(name, sizeof name - 1) == 0 ? std::string(name) : std::string("?");
}

std::string temporary_trace_path() {
  return (std::filesystem::temp_directory_path() / fmt::format("plimsoll-train-{}.plimsoll", ::getpid())).string();
}

PipelineOptions loader_options(const TrainOptions& o, std::uint64_t dataset_size, std::size_t batch, bool train,
                               std::uint64_t epoch) {
  constexpr std::size_t kPixels = 28 * 28;
  PipelineOptions options;
  options.dataset_size = dataset_size;
  options.batch_size = batch;
  options.sample_fields = {kPixels * sizeof(float), sizeof(std::int64_t)};
  options.workers = std::max<std::size_t>(1, o.loader_workers);
  options.scratch_bytes = kPixels;  // the augmented image, before it is normalized
  options.max_bytes = kQueuedBatches * batch_buffer_bytes(options) + options.workers * options.scratch_bytes;
  options.shuffle = train;
  // One pipeline per epoch, so --limit-batches can stop one early; the seed varies the epoch's order.
  options.seed = sample_seed(o.seed, epoch, 0);
  return options;
}

std::vector<SampleStage> loader_stages(const ImageDataset& data, bool augment) {
  const std::size_t pixels = data.shape().bytes();
  return {[&data, pixels, augment](Sample& sample) {
    const auto scratch = std::span(reinterpret_cast<std::uint8_t*>(sample.scratch.data()), pixels);
    if (augment) {
      augment_sample(data.image(sample.index), scratch, data.shape(), sample.seed, kAugment);
    } else {
      std::ranges::copy(data.image(sample.index), scratch.begin());
    }
    normalize(scratch, {reinterpret_cast<float*>(sample.fields[0].data()), pixels}, kMean, kStdDev);
    const std::int64_t label = data.label(sample.index);
    std::memcpy(sample.fields[1].data(), &label, sizeof label);
  }};
}

BatchView view_of(const Batch& batch, std::size_t begin, std::size_t end) {
  return {batch.field_as<const float>(0).data() + begin * 28 * 28, batch.field_as<const std::int64_t>(1).data() + begin,
          end - begin};
}

// Which contiguous share of every batch this rank (of `ranks`) trains on.
BatchView rank_share(const Batch& batch, int rank, int ranks) {
  const std::size_t n = static_cast<std::size_t>(ranks), r = static_cast<std::size_t>(rank);
  return view_of(batch, batch.size() * r / n, batch.size() * (r + 1) / n);
}

// Data parallelism: replica r takes the r-th contiguous share of the batch, each on its own thread (replica 0 on
// this one). An exception on any thread (an out-of-memory on one device) is rethrown here after all joined.
StepResult forward_backward_all(const std::vector<std::unique_ptr<Replica>>& replicas, const Batch& batch) {
  const std::size_t count = replicas.size();
  std::vector<StepResult> results(count);
  std::vector<std::exception_ptr> errors(count);
  auto run = [&](std::size_t r) {
    try {
      results[r] = replicas[r]->forward_backward(view_of(batch, batch.size() * r / count, batch.size() * (r + 1) / count));
    } catch (...) {
      errors[r] = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  for (std::size_t r = 1; r < count; ++r) threads.emplace_back(run, r);
  run(0);
  for (std::thread& thread : threads) thread.join();
  StepResult total;
  for (std::size_t r = 0; r < count; ++r) {
    if (errors[r]) std::rethrow_exception(errors[r]);
    total += results[r];
  }
  return total;
}

// `model` is a Replica or a StagedReplica.
template <class Model>
StepResult evaluate(Model& model, const TrainOptions& o, const ImageDataset& test) {
  Pipeline pipeline(loader_options(o, test.size(), kTestBatch, false, 0), loader_stages(test, false));
  StepResult total;
  while (auto batch = pipeline.next()) total += model.evaluate(view_of(*batch, 0, batch->size()));
  return total;
}

std::string model_marker(const TrainOptions& o, int rank, int ranks, std::size_t rank_batch) {
  std::string marker = fmt::format("model fashion_cnn batch {} input 28x28x1 optimizer adam devices {}", rank_batch,
                                   o.devices);
  if (ranks > 1) marker += fmt::format(" rank {} of {} global_batch {}", rank, ranks, o.batch_size);
  if (o.model_parallel > 1) {
    marker += fmt::format(" model_parallel {} micro_batches {}", o.model_parallel,
                          o.micro_batches == 0 ? kDefaultMicroBatches : o.micro_batches);
  }
  return marker;
}

double mean(double sum, std::size_t count) { return count == 0 ? 0 : sum / static_cast<double>(count); }
double share(std::size_t part, std::size_t count) { return mean(static_cast<double>(part), count); }

// The timeline of the recorded run: its trace replayed on a simulated device as large as the devices' limits
// together (the replay's in-use bytes are the run's; reserved is what plimsoll's engine maps for them).
void write_timeline(const Trace& trace, const std::vector<DeviceReport>& devices, const std::string& path) {
  std::uint64_t limit = 0;
  for (const DeviceReport& device : devices) limit += device.limit_bytes;
  Config config;
  config.log_device_creation = false;
  Runtime runtime(config);
  Allocator& simulated = runtime.device(fmt::format("sim:{}", std::max<std::uint64_t>(limit, 1)));
  telemetry::TimelineRecorder recorder(trace);
  telemetry::ReplayOptions options;
  options.timeline = &recorder;
  const telemetry::ReplayResult result = telemetry::replay(trace, simulated, options);
  telemetry::write_output_file(path, telemetry::timeline_html({recorder.finish(result)}), "--html");
}

}  // namespace

std::uint64_t TrainReport::peak_in_use_bytes() const {
  std::uint64_t sum = 0;
  for (const DeviceReport& device : devices) sum += device.stats.peak_in_use_bytes;
  return sum;
}

std::uint64_t TrainReport::peak_reserved_bytes() const {
  std::uint64_t sum = 0;
  for (const DeviceReport& device : devices) sum += device.stats.peak_reserved_bytes;
  return sum;
}

TrainReport run_training(const TrainOptions& o) {
  validate(o);
  const double started = telemetry::steady_seconds();
  const std::filesystem::path dir = o.data_dir.empty() ? default_fashion_mnist_dir() : o.data_dir;
  const ImageDataset train_set = load_fashion_mnist(dir, Split::train);
  const ImageDataset test_set = load_fashion_mnist(dir, Split::test);

  Runtime& runtime = Runtime::global();
  runtime.replace_config(job_config(o, o.distributed ? o.distributed->rank : 0));

  TrainReport report;
  const int rank = o.distributed ? o.distributed->rank : 0;
  const int ranks = o.distributed ? o.distributed->world_size : 1;
  report.rank = rank;
  report.world_size = ranks;
  report.trace_path = rank_path(o.record_path, rank);
  report.html_path = rank == 0 ? o.html_path : "";
  const std::string trace_path = o.record_path.empty() ? temporary_trace_path() : report.trace_path;
  std::vector<Allocator*> devices;
  for (const std::string& name : replica_devices(o)) devices.push_back(&runtime.device(name));

  // Call sites cost a stack walk per allocation: a few hundred per step, against tens of milliseconds of compute.
  auto recording = Recording::open(trace_path, {.call_sites = true});
  // Names the job for `plimsoll plan`, which predicts other batch sizes from recordings at a few (docs/plan.md).
  // A rank of a multi-process job trains on its share of each batch, and its recording is of that share.
  const std::size_t rank_batch = o.batch_size * static_cast<std::size_t>(rank + 1) / static_cast<std::size_t>(ranks) -
                                 o.batch_size * static_cast<std::size_t>(rank) / static_cast<std::size_t>(ranks);
  recording->marker(model_marker(o, rank, ranks, rank_batch));
  for (Allocator* device : devices) device->record_to(recording);
  plimsoll::torch::install(*devices.front());
  // One compute thread per replica by default. libtorch's OpenMP threads spin while they wait, so on a small
  // machine a second one fights the loader's worker for a core and a step gets slower, not faster (docs/train.md).
  const std::size_t threads = o.threads != 0 ? o.threads : devices.size();
  set_compute_threads(static_cast<int>(std::max<std::size_t>(1, threads / devices.size())));

  // Reads the recording back: the leak watch, the timeline, and the temporary trace removed. Runs on success and
  // on an out-of-memory alike, so --record and --html keep what led up to it.
  auto finish_recording = [&] {
    for (Allocator* device : devices) device->record_to(nullptr);
    recording->close();
    recording.reset();
    report.trace = read_trace(trace_path);
    report.leaks = telemetry::find_leaks(report.trace);
    if (!report.html_path.empty()) write_timeline(report.trace, report.devices, report.html_path);
    if (o.record_path.empty()) {
      std::error_code ignored;
      std::filesystem::remove(trace_path, ignored);
    }
  };
  auto device_reports = [&] {
    report.devices.clear();
    for (Allocator* device : devices) {
      report.devices.push_back({device->description().name, device->description().limit_bytes, device->stats()});
    }
  };

  // Declared outside the try: the recording is read back while the replicas still hold their weights, so the
  // trace ends with what a job holds between steps rather than with the teardown's frees.
  std::vector<std::unique_ptr<Replica>> replicas;
  std::unique_ptr<StagedReplica> staged;  // --model-parallel: the one model, over all the devices
  std::unique_ptr<ProcessGroup> group;
  std::uint64_t step = 0;
  try {
    if (o.distributed) group = std::make_unique<ProcessGroup>(*o.distributed);
    std::vector<Replica*> replica_pointers;
    const ReplicaOptions model_options{.seed = o.seed, .learning_rate = o.learning_rate};
    if (o.model_parallel > 1) {
      staged = std::make_unique<StagedReplica>(devices, model_options,
                                               o.micro_batches == 0 ? kDefaultMicroBatches : o.micro_batches,
                                               static_cast<int>(std::max<std::size_t>(1, threads / devices.size())));
      staged->keep_every_batch(o.leak_demo);
      report.parameters = staged->parameters();
      report.model_parallel = o.model_parallel;
      report.micro_batches = staged->micro_batches();
    } else {
      for (Allocator* device : devices) {
        replicas.push_back(std::make_unique<Replica>(*device, model_options));
        replicas.back()->keep_every_batch(o.leak_demo);
        replica_pointers.push_back(replicas.back().get());
      }
      report.parameters = replicas.front()->parameters();
    }
    if (o.progress) {
      const std::uint64_t per_epoch = (train_set.size() + o.batch_size - 1) / o.batch_size;
      fmt::print(stderr, "training a CNN ({} parameters) on Fashion-MNIST from {}: {} epochs of {} steps, {} samples "
                         "per step, on {} ({} compute threads){}\n",
                 report.parameters, dir.string(), o.epochs,
                 o.limit_batches == 0 ? per_epoch : std::min(o.limit_batches, per_epoch), o.batch_size,
                 fmt::join(replica_devices(o), " + "), threads,
                 ranks > 1      ? fmt::format(" in each of {} processes", ranks)
                 : staged       ? fmt::format(", the model split in {} stages pipelining {} micro-batches",
                                              o.model_parallel, report.micro_batches)
                                : "");
    }

    for (std::uint64_t epoch = 1; epoch <= o.epochs; ++epoch) {
      const double epoch_started = telemetry::steady_seconds();
      Pipeline loader(loader_options(o, train_set.size(), o.batch_size, true, epoch), loader_stages(train_set, true));
      const std::uint64_t batches =
          o.limit_batches == 0 ? loader.batches_per_epoch() : std::min(o.limit_batches, loader.batches_per_epoch());
      EpochReport summary{.epoch = epoch};
      StepResult seen;
      {
        TrainProgress progress(o.progress, epoch, o.epochs, batches);
        while (summary.steps < batches) {
          std::optional<Batch> batch = loader.next();
          if (!batch) break;
          plimsoll::step();
          ++step;
          kill_if_asked(rank, step);
          const double step_started = telemetry::steady_seconds();
          if (staged) {
            seen += staged->train_step(view_of(*batch, 0, batch->size()));  // its optimizer step included
            batch->release();
          } else if (group) {
            seen += replicas.front()->forward_backward(rank_share(*batch, rank, ranks));
            batch->release();
            const double reduce_started = telemetry::steady_seconds();
            group->average(*replicas.front());
            report.all_reduce_seconds += telemetry::steady_seconds() - reduce_started;
          } else {
            seen += forward_backward_all(replicas, *batch);
            batch->release();
            average_gradients(replica_pointers);
          }
          for (const auto& replica : replicas) replica->optimizer_step();
          report.step_seconds += telemetry::steady_seconds() - step_started;
          if (group && o.verify_replicas) {
            if (!group->replicas_identical(*replicas.front())) {
              throw InvalidState(fmt::format("rank {}: the replicas' weights differ after step {}: the ranks did "
                                             "not train the same model (different --seed or --lr?)", rank, step));
            }
            ++report.replica_checks;
          }
          ++summary.steps;
          progress.update(summary.steps, mean(seen.loss_sum, seen.samples), share(seen.correct, seen.samples));
        }
        loader.cancel();
        report.loader = loader.metrics();
      }
      if (group) {
        // Every rank saw its share of each batch: the epoch's loss and accuracy are over all of them.
        const std::vector<double> all = group->sum({seen.loss_sum, static_cast<double>(seen.correct),
                                                    static_cast<double>(seen.samples)});
        seen = {all[0], static_cast<std::size_t>(all[1]), static_cast<std::size_t>(all[2])};
      }
      recording->marker(fmt::format("epoch {} evaluation", epoch));
      // The replicas hold the same weights and batch-norm statistics (same start, averaged every step), so one
      // copy's evaluation is the model's: replica 0's, on rank 0 alone in a multi-process job.
      const StepResult tested = staged      ? evaluate(*staged, o, test_set)
                                : rank == 0 ? evaluate(*replicas.front(), o, test_set)
                                            : StepResult{};
      summary.train_loss = mean(seen.loss_sum, seen.samples);
      summary.train_accuracy = share(seen.correct, seen.samples);
      summary.test_loss = mean(tested.loss_sum, tested.samples);
      summary.test_accuracy = share(tested.correct, tested.samples);
      summary.seconds = telemetry::steady_seconds() - epoch_started;
      report.steps += summary.steps;
      report.epochs.push_back(summary);
      if (o.progress) {
        fmt::print(stderr, "epoch {}/{}: {} steps in {:.1f} s, train loss {:.3f}, train accuracy {:.1f}%, test "
                           "accuracy {:.2f}%\n",
                   epoch, o.epochs, summary.steps, summary.seconds, summary.train_loss, 100 * summary.train_accuracy,
                   100 * summary.test_accuracy);
      }
    }
    report.test_accuracy = report.epochs.back().test_accuracy;
    if (staged) report.stage_busy_seconds = staged->stage_busy_seconds();
    device_reports();  // while the weights and optimizer state are live: what a job holds between steps
  } catch (const TrainingOutOfMemory& oom) {
    if (group) {
      const std::string what = oom.what();
      group->announce_failure(fmt::format("ran out of memory at step {} ({}); its report is on its stderr", step,
                                          what.substr(0, what.find('\n'))));
    }
    device_reports();
    finish_recording();
    throw;
  } catch (...) {
    // Any other failure (a pipeline stage, a write error): no verdict to give, but no temporary file left behind.
    for (Allocator* device : devices) device->record_to(nullptr);
    if (o.record_path.empty()) {
      recording.reset();
      std::error_code ignored;
      std::filesystem::remove(trace_path, ignored);
    }
    throw;
  }
  report.seconds = telemetry::steady_seconds() - started;
  report.allocator_warning = plimsoll::torch::allocator_report_line();
  finish_recording();
  if (group) {
    RankReport mine;
    mine.rank = rank;
    mine.pid = static_cast<long>(::getpid());
    mine.host = host_name();
    const DeviceReport& device = report.devices.front();
    mine.device = device.name;
    mine.limit_bytes = device.limit_bytes;
    mine.in_use_bytes = device.stats.in_use_bytes;
    mine.peak_in_use_bytes = device.stats.peak_in_use_bytes;
    mine.reserved_bytes = device.stats.reserved_bytes;
    mine.peak_reserved_bytes = device.stats.peak_reserved_bytes;
    mine.leak = report.leaks.leak();
    mine.leak_verdict = telemetry::to_string(report.leaks.verdict);
    mine.leak_bytes_per_step = report.leaks.bytes_per_step;
    mine.replica_checks = report.replica_checks;
    mine.step_seconds = report.step_seconds;
    mine.all_reduce_seconds = report.all_reduce_seconds;
    for (const std::string& text : group->gather_on_root(rank_report_json(mine))) {
      report.ranks.push_back(rank_report_of(text));
    }
  }
  replicas.clear();
  staged.reset();
  return report;
}

}  // namespace plimsoll::train
