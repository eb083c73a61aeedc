// StepModel (plimsoll/plan.hpp): recordings at a few batch sizes matched, allocation by allocation, and fitted.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "plan/allocation_matching.hpp"
#include "plan/step_model_state.hpp"
#include "plimsoll/error.hpp"
#include "plimsoll/plan.hpp"
#include "plimsoll/size.hpp"

namespace plimsoll {
namespace {

using plan::ModelledRecording;

// Two recordings of one job match almost allocation for allocation; below this share of matched allocations they
// are taken for different jobs.
constexpr double kSameJobShare = 0.5;

std::string file_name(const std::string& path) { return std::filesystem::path(path).filename().string(); }

const char* const kRecordHint =
    "record the job at two or more batch sizes with `plimsoll train --record FILE --batch-size N` (it writes the "
    "marker), or mark each trace with \"# model NAME batch N\"";

std::uint64_t batch_of(const RecordedJob& job, const std::optional<JobMarker>& marker) {
  if (job.batch) return *job.batch;
  if (marker && marker->batch) return *marker->batch;
  throw InvalidArgument(fmt::format("{}: no batch size: the trace has no \"# model NAME batch N\" marker; give it "
                                    "with --batch-of {}=N, or {}",
                                    job.trace.origin, job.trace.origin, kRecordHint));
}

void check_same_job(const std::vector<std::optional<JobMarker>>& markers, const std::vector<RecordedJob>& jobs) {
  const std::optional<JobMarker>* first = nullptr;
  std::size_t first_index = 0;
  for (std::size_t i = 0; i < markers.size(); ++i) {
    if (!markers[i]) continue;
    if (first == nullptr) {
      first = &markers[i];
      first_index = i;
      continue;
    }
    const JobMarker& a = **first;
    const JobMarker& b = *markers[i];
    const bool other_model = a.model != b.model;
    const bool other_optimizer = !a.optimizer.empty() && !b.optimizer.empty() && a.optimizer != b.optimizer;
    if (other_model || other_optimizer) {
      const char* kind = other_model ? "model" : "optimizer";
      throw InvalidArgument(fmt::format(
          "{} and {} are recordings of different jobs ({} {} against {} {}; their markers: \"{}\" and \"{}\"): a "
          "plan needs one model and one optimizer recorded at several batch sizes; record {} with {} at another "
          "batch size",
          jobs[first_index].trace.origin, jobs[i].trace.origin, kind, other_model ? a.model : a.optimizer, kind,
          other_model ? b.model : b.optimizer, a.text, b.text, a.model,
          a.optimizer.empty() ? "its optimizer" : a.optimizer));
    }
  }
}

}  // namespace

const plan::ModelledRecording& StepModel::State::nearest(std::uint64_t batch) const {
  const ModelledRecording* best = &recordings.front();
  double best_distance = std::abs(std::log(static_cast<double>(batch) / static_cast<double>(best->batch)));
  for (const ModelledRecording& recording : recordings) {
    const double distance = std::abs(std::log(static_cast<double>(batch) / static_cast<double>(recording.batch)));
    if (distance <= best_distance) {
      best = &recording;
      best_distance = distance;
    }
  }
  return *best;
}

StepModel::StepModel(std::unique_ptr<State> state) : state_(std::move(state)) {}
StepModel::StepModel(StepModel&&) noexcept = default;
StepModel& StepModel::operator=(StepModel&&) noexcept = default;
StepModel::~StepModel() = default;

const std::string& StepModel::job() const { return state_->job; }
std::size_t StepModel::steps() const { return state_->steps; }

std::vector<std::uint64_t> StepModel::batches() const {
  std::vector<std::uint64_t> batches;
  for (const ModelledRecording& recording : state_->recordings) batches.push_back(recording.batch);
  return batches;
}

StepModel StepModel::build(std::vector<RecordedJob> jobs) {
  if (jobs.empty()) throw InvalidArgument(fmt::format("no trace given: {}", kRecordHint));
  std::vector<std::optional<JobMarker>> markers;
  for (const RecordedJob& job : jobs) markers.push_back(find_job_marker(job.trace));
  check_same_job(markers, jobs);

  auto state = std::make_unique<State>();
  state->steps = jobs.front().trace.steps.size();
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    const Trace& trace = jobs[i].trace;
    if (trace.steps.empty()) {
      throw InvalidArgument(fmt::format(
          "{} has no training steps (no \"# step N begin\" / \"# step N end\" markers): plan models a step; record "
          "with plimsoll::step() called at every training step (`plimsoll train --record FILE` does), a few "
          "steps per batch size",
          trace.origin));
    }
    state->steps = std::min(state->steps, trace.steps.size());
    // Several devices in one recording (data-parallel replicas) would be summed as one: refused rather than wrong.
    std::uint16_t device = 0;
    for (const TraceEvent& event : trace.events) {
      if (event.kind != TraceEvent::Kind::allocate) continue;
      if (device != 0 && event.device != device) {
        throw InvalidArgument(fmt::format(
            "{} holds allocations of more than one device ({} and {}): plan models one device; record one replica "
            "(`plimsoll train --devices 1`), or one recording per device",
            trace.origin, trace.devices[device], trace.devices[event.device]));
      }
      device = event.device;
    }
  }
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    ModelledRecording recording;
    recording.batch = batch_of(jobs[i], markers[i]);
    recording.trace = std::move(jobs[i].trace);
    for (const ModelledRecording& other : state->recordings) {
      if (other.batch == recording.batch) {
        throw InvalidArgument(fmt::format("{} and {} both ran at batch {}: record the second at another batch "
                                          "size (or leave it out)",
                                          other.trace.origin, recording.trace.origin, recording.batch));
      }
    }
    state->recordings.push_back(std::move(recording));
  }
  std::sort(state->recordings.begin(), state->recordings.end(),
            [](const ModelledRecording& a, const ModelledRecording& b) { return a.batch < b.batch; });
  for (ModelledRecording& recording : state->recordings) {
    recording.sequence = plan::cut_steps(recording.trace, state->steps);
  }
  state->job = file_name(state->recordings.front().trace.origin);
  for (const std::optional<JobMarker>& marker : markers) {
    if (marker && !marker->model.empty()) {
      state->job = marker->model;
      break;
    }
  }

  // Each recording's allocations, fitted from their counterparts in every other recording.
  for (ModelledRecording& recording : state->recordings) {
    const plan::MatchSide self{&recording.trace, &recording.sequence, recording.batch};
    std::vector<std::vector<std::pair<std::uint64_t, std::uint64_t>>> points(recording.sequence.allocations.size());
    for (std::size_t a = 0; a < points.size(); ++a) {
      points[a].emplace_back(recording.batch, recording.sequence.allocations[a].bytes);
    }
    for (const ModelledRecording& other : state->recordings) {
      if (&other == &recording) continue;
      const auto matches = plan::match_allocations(self, {&other.trace, &other.sequence, other.batch});
      std::size_t matched = 0;
      for (std::size_t a = 0; a < matches.size(); ++a) {
        if (!matches[a]) continue;
        ++matched;
        points[a].emplace_back(other.batch, other.sequence.allocations[*matches[a]].bytes);
      }
      const std::size_t most = std::max(recording.sequence.allocations.size(), other.sequence.allocations.size());
      if (most > 0 && static_cast<double>(matched) < kSameJobShare * static_cast<double>(most)) {
        throw InvalidArgument(fmt::format(
            "{} (batch {}) and {} (batch {}) do not look like one job: only {} of their {} allocations match "
            "(same step, tag, call site and position); record the same model and optimizer at each batch size",
            recording.trace.origin, recording.batch, other.trace.origin, other.batch, matched, most));
      }
    }
    recording.fits.reserve(points.size());
    for (auto& allocation_points : points) recording.fits.push_back(plan::fit_size(std::move(allocation_points)));
  }
  return StepModel(std::move(state));
}

std::uint64_t StepModel::fixed_bytes() const {
  const ModelledRecording& recording = state_->recordings.back();
  const plan::StepSequence& sequence = recording.sequence;
  std::vector<bool> live(sequence.allocations.size(), false);
  for (std::size_t op = 0; op < sequence.segment_end(0); ++op) {
    live[sequence.ops[op].allocation] = !sequence.ops[op].is_free;
  }
  const bool one_recording = state_->recordings.size() == 1;
  std::uint64_t bytes = 0;
  for (std::size_t a = 0; a < live.size(); ++a) {
    if (live[a] && (one_recording || recording.fits[a].kind == SizeFit::constant)) {
      bytes += sequence.allocations[a].bytes;
    }
  }
  return bytes;
}

FitSummary StepModel::fit_summary() const {
  const ModelledRecording& recording = state_->recordings.back();
  const plan::StepSequence& sequence = recording.sequence;
  FitSummary summary{.batch = recording.batch, .allocations = sequence.allocations.size()};
  // Live bytes by kind at the recording's peak of live bytes.
  std::vector<bool> live(sequence.allocations.size(), false);
  std::uint64_t live_bytes = 0;
  std::uint64_t peak = 0;
  std::size_t peak_op = 0;
  for (std::size_t op = 0; op < sequence.ops.size(); ++op) {
    const plan::SequenceOp& step = sequence.ops[op];
    const std::uint64_t bytes = sequence.allocations[step.allocation].bytes;
    live_bytes = step.is_free ? live_bytes - bytes : live_bytes + bytes;
    if (live_bytes > peak) {
      peak = live_bytes;
      peak_op = op;
    }
  }
  for (std::size_t op = 0; op <= peak_op && op < sequence.ops.size(); ++op) {
    live[sequence.ops[op].allocation] = !sequence.ops[op].is_free;
  }
  std::vector<std::size_t> unclean;
  for (std::size_t a = 0; a < sequence.allocations.size(); ++a) {
    const auto kind = static_cast<std::size_t>(recording.fits[a].kind);
    ++summary.counts[kind];
    if (live[a]) summary.peak_share_bytes[kind] += sequence.allocations[a].bytes;
    if (recording.fits[a].kind == SizeFit::none || recording.fits[a].kind == SizeFit::unmatched) unclean.push_back(a);
  }
  std::stable_sort(unclean.begin(), unclean.end(), [&](std::size_t x, std::size_t y) {
    return sequence.allocations[x].bytes > sequence.allocations[y].bytes;
  });
  if (state_->recordings.size() == 1) unclean.clear();  // one recording: nothing to match, nothing to say
  constexpr std::size_t kMostUnclean = 10;
  for (std::size_t i = 0; i < std::min(unclean.size(), kMostUnclean); ++i) {
    const std::size_t a = unclean[i];
    const plan::SequenceAllocation& allocation = sequence.allocations[a];
    std::string where = allocation.segment == 0 ? std::string("before the first step")
                                                : fmt::format("step {}", allocation.segment);
    if (allocation.tag != 0) where += fmt::format(", tag {}", recording.trace.tags[allocation.tag]);
    if (allocation.site != 0) where += fmt::format(", call site {}", recording.trace.sites[allocation.site]);
    summary.largest_unclean.push_back({.fit = recording.fits[a].kind, .where = where, .sizes = recording.fits[a].points});
  }
  return summary;
}

Trace StepModel::rebuild(std::uint64_t batch) const {
  if (batch == 0) throw InvalidArgument("batch size 0: give a batch size of at least 1");
  if (state_->recordings.size() == 1 && batch != state_->recordings.front().batch) {
    const ModelledRecording& only = state_->recordings.front();
    throw InvalidArgument(fmt::format(
        "one trace ({}, batch {}) predicts batch {} only: to predict batch {} (or --fit), record the job at a "
        "second batch size too, e.g. `plimsoll train --record b{}.plimsoll --batch-size {}`, and give both traces",
        only.trace.origin, only.batch, only.batch, batch, std::max<std::uint64_t>(1, only.batch / 2),
        std::max<std::uint64_t>(1, only.batch / 2)));
  }
  const ModelledRecording& source = state_->nearest(batch);
  const plan::StepSequence& sequence = source.sequence;
  Trace trace;
  trace.origin = fmt::format("{} at batch {} (from {})", state_->job, batch, file_name(source.trace.origin));
  trace.tags = source.trace.tags;
  trace.sites = source.trace.sites;
  trace.devices = {""};
  trace.slots = static_cast<std::uint32_t>(sequence.allocations.size());
  trace.events.reserve(sequence.ops.size() + 2 * sequence.segments());
  std::vector<std::uint64_t> bytes(sequence.allocations.size());
  // A batch so large that the step's sizes together pass 1 EiB is no device's: refuse it rather than overflow.
  constexpr std::uint64_t kLargestStep = std::uint64_t{1} << 60;
  std::uint64_t total = 0;
  for (std::size_t a = 0; a < bytes.size(); ++a) {
    bytes[a] = source.fits[a].bytes_at(batch);
    if (__builtin_add_overflow(total, bytes[a], &total) || total > kLargestStep) {
      throw InvalidArgument(fmt::format("batch {}: the step rebuilt at that size would allocate more than {} in all; "
                                        "give a batch size a real device could hold",
                                        batch, format_size(kLargestStep)));
    }
  }

  std::uint64_t live = 0;
  const auto add_marker = [&trace](std::string text) {
    trace.events.push_back({.kind = TraceEvent::Kind::marker, .slot = static_cast<std::uint32_t>(trace.markers.size())});
    trace.markers.push_back(std::move(text));
  };
  for (std::size_t segment = 0; segment < sequence.segments(); ++segment) {
    if (segment > 0) {
      trace.steps.push_back({.number = static_cast<int>(segment), .begin = trace.events.size()});
      add_marker(fmt::format("step {} begin", segment));
    }
    for (std::size_t op = sequence.segment_begin[segment]; op < sequence.segment_end(segment); ++op) {
      const plan::SequenceOp& step = sequence.ops[op];
      const plan::SequenceAllocation& allocation = sequence.allocations[step.allocation];
      TraceEvent event{.kind = step.is_free ? TraceEvent::Kind::free : TraceEvent::Kind::allocate,
                       .slot = step.allocation,
                       .bytes = step.is_free ? 0 : bytes[step.allocation],
                       .line = static_cast<std::uint32_t>(op + 1),
                       .tag = allocation.tag,
                       .site = allocation.site};
      if (step.is_free) {
        live -= bytes[step.allocation];
        ++trace.frees;
      } else {
        live += bytes[step.allocation];
        ++trace.allocations;
        trace.peak_live_bytes = std::max(trace.peak_live_bytes, live);
      }
      trace.events.push_back(event);
    }
    if (segment > 0) {
      trace.steps.back().end = trace.events.size();
      add_marker(fmt::format("step {} end", segment));
    }
  }
  return trace;
}

}  // namespace plimsoll
