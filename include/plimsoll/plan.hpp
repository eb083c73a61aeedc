#pragma once
// Will it fit? Peak memory of a training step at any batch size, and the largest batch a device holds, predicted
// from a few recorded steps (`plimsoll plan`, docs/plan.md).
//
//   std::vector<plimsoll::RecordedJob> runs = {{plimsoll::read_trace("b8.plimsoll")}, {read_trace("b16.plimsoll")}};
//   plimsoll::StepModel model = plimsoll::StepModel::build(std::move(runs));  // batch sizes from the markers
//   plimsoll::Prediction at_64 = plimsoll::predict(model, 64, plimsoll::parse_size("16GiB"));
//
// The model: each recording is cut into what happens before the first step (weights, ...) and its steps; each
// allocation of one recording is matched with its counterparts in the others (same step, same tag and call
// site, same position among those, sizes that can belong to one line), and its size fitted as a function of the
// batch size: constant (weights, optimizer state), linear (activations), or neither. The recording nearest the
// asked batch size is then replayed with every size replaced by its fit.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "plimsoll/trace.hpp"

namespace plimsoll {

/// What a recording says of its job, from a marker "model NAME batch N [optimizer OPT] [KEY VALUE]...": `plimsoll
/// train --record` writes one, and so does the generator of ../shared/traces.
struct JobMarker {
  std::string text{};  // the whole marker, without "# "
  std::string model{};
  std::string optimizer{};  // empty when the marker names none
  std::optional<std::uint64_t> batch{};
};
/// The first marker of `trace` that starts with "model ", parsed; nothing when there is none.
std::optional<JobMarker> find_job_marker(const Trace& trace);

/// One recording and the batch size it ran at (unset: from its job marker).
struct RecordedJob {
  Trace trace{};
  std::optional<std::uint64_t> batch{};
};

/// How one allocation's size depends on the batch size.
enum class SizeFit {
  constant,   // the same at every recorded batch size
  linear,     // a + b * batch through every recorded size (within rounding)
  none,       // neither: predicted piecewise-linearly from the nearest recorded sizes
  unmatched,  // no counterpart in another recording: kept at its recorded size
};
std::string_view to_string(SizeFit fit);

/// An allocation without a clean fit, for the report.
struct UncleanAllocation {
  SizeFit fit = SizeFit::none;
  std::string where{};  // "step 2, tag activations, call site f (file:line)"
  std::vector<std::pair<std::uint64_t, std::uint64_t>> sizes{};  // (batch, bytes) as recorded
};

/// How well the recordings fit, over the allocations of one recording.
struct FitSummary {
  std::uint64_t batch = 0;  // of the recording counted
  std::size_t allocations = 0;
  std::size_t counts[4] = {};       // by SizeFit
  std::uint64_t peak_share_bytes[4] = {};  // bytes of each kind live at that recording's peak
  std::vector<UncleanAllocation> largest_unclean{};  // the largest ones, at most 10
};

class StepModel {
 public:
  /// Throws InvalidArgument, saying what to record instead, when: no recording is given; one has no steps, or no
  /// batch size (neither a job marker nor RecordedJob::batch); two ran at the same batch size; or they are of
  /// different jobs (their markers name different models or optimizers, or too few allocations match).
  static StepModel build(std::vector<RecordedJob> recordings);

  /// The recorded batch sizes, ascending.
  std::vector<std::uint64_t> batches() const;
  /// The job marker's model name (or the first recording's file name when it has none).
  const std::string& job() const;
  /// Steps modelled (the fewest any recording has).
  std::size_t steps() const;
  /// Bytes live when the first step begins whose size does not depend on the batch (weights, ...): below this no
  /// batch size fits.
  std::uint64_t fixed_bytes() const;
  FitSummary fit_summary() const;  // over the recording with the largest batch

  /// The step sequence at `batch`: the nearest recording's events with every size predicted. Throws
  /// InvalidArgument when there is one recording and `batch` is not its batch size.
  Trace rebuild(std::uint64_t batch) const;

  StepModel(StepModel&&) noexcept;
  StepModel& operator=(StepModel&&) noexcept;
  ~StepModel();
  struct State;  // src/plan/step_model_state.hpp

 private:
  explicit StepModel(std::unique_ptr<State> state);
  std::unique_ptr<State> state_{};
};

/// The bytes of a device named for `plimsoll plan`: "sim:16GiB", a plain size ("16GiB"), or "cuda:N" (the GPU's
/// memory, which needs a CUDA driver). Throws InvalidArgument naming the accepted forms, or why cuda:N is not
/// available.
std::uint64_t plan_device_bytes(std::string_view device);

enum class PlanAllocator { plimsoll, pytorch, tensorflow };
std::string_view to_string(PlanAllocator allocator);
/// "plimsoll", "pytorch" or "tensorflow"; throws InvalidArgument naming the accepted ones.
PlanAllocator parse_plan_allocator(std::string_view text);

/// Where the bytes live at an allocator's peak went, by tag (or by call site when the trace has no tags).
struct PeakShare {
  std::string name{};
  std::uint64_t bytes = 0;
};

struct AllocatorPrediction {
  PlanAllocator allocator = PlanAllocator::plimsoll;
  std::uint64_t peak_live_bytes = 0;      // the most bytes the step holds at once (requested sizes)
  std::uint64_t peak_reserved_bytes = 0;  // what the allocator takes from the device, with no device limit
  bool fits = false;                      // the step ran to the end on the device
  std::vector<PeakShare> peak_fill{};       // largest first
  std::string oom_report{};                 // when it does not fit: the allocator's out-of-memory report
};

struct Prediction {
  std::uint64_t batch = 0;
  std::uint64_t device_bytes = 0;
  std::vector<AllocatorPrediction> allocators{};
  /// Empty, or how far the batch lies outside the recorded sizes ("batch 512 is 8x the largest recorded (64)").
  std::string extrapolation{};
};

/// Replays the step rebuilt at `batch` under each allocator on a simulated device of `device_bytes`.
Prediction predict(const StepModel& model, std::uint64_t batch, std::uint64_t device_bytes,
                   const std::vector<PlanAllocator>& allocators = {PlanAllocator::plimsoll, PlanAllocator::pytorch,
                                                                   PlanAllocator::tensorflow});

struct LargestBatch {
  PlanAllocator allocator = PlanAllocator::plimsoll;
  std::uint64_t largest_batch = 0;  // 0: not even batch 1 fits
  std::optional<AllocatorPrediction> at_largest{};
  AllocatorPrediction first_too_large{};  // at largest_batch + 1, with its out-of-memory report
  std::uint64_t headroom_bytes = 0;     // device bytes over the peak live bytes at largest_batch
  /// A batch below largest_batch that does not fit, when the search found one: caching allocators round to
  /// segments, so a larger batch can need less memory than a smaller one.
  std::optional<std::uint64_t> smaller_batch_that_does_not_fit{};
};

/// The largest batch size each allocator fits on a device of `device_bytes` with `margin` (a share of the device,
/// in [0, 1)) kept free: a search over whole batch sizes up to `max_batch` (doubling, then bisection, then probes up
/// to 4x above the boundary found, since an allocator's reserved bytes need not grow with the batch size; a batch
/// between probes can be missed). Throws InvalidArgument with one recording.
std::vector<LargestBatch> largest_batch(const StepModel& model, std::uint64_t device_bytes, double margin,
                                        const std::vector<PlanAllocator>& allocators,
                                        std::uint64_t max_batch = std::uint64_t{1} << 20);

}  // namespace plimsoll
