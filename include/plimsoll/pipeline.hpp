#pragma once
// An input pipeline that feeds a training loop from N worker threads while holding a byte budget it never exceeds
// (docs/pipeline.md). Workers build whole batches, sample by sample, straight into buffers from a recycling pool,
// so once the pool has warmed up no step allocates. The budget covers every byte the pipeline owns: buffers being
// built, queued, held by the consumer, idle in the pool, parked until a copy from them completes, and the workers'
// scratch.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "plimsoll/error.hpp"

namespace plimsoll {

class Allocator;

/// The seed of one sample's randomness, mixed from the pipeline's seed, the epoch and the sample's dataset index.
/// It depends on nothing else, so augmentation is the same whatever the number of workers or the delivery order.
std::uint64_t sample_seed(std::uint64_t seed, std::uint64_t epoch, std::uint64_t index) noexcept;

/// The order in which one epoch visits the dataset: 0..size-1, or a permutation drawn from (seed, epoch) alone.
std::vector<std::uint64_t> epoch_order(std::uint64_t dataset_size, bool shuffle, std::uint64_t seed,
                                       std::uint64_t epoch);

/// One sample being built: what it is and where its bytes go.
struct Sample {
  std::uint64_t epoch = 0;
  std::uint64_t index = 0;  ///< Position in the dataset (after shuffling).
  std::size_t slot = 0;     ///< Position in the batch.
  std::uint64_t seed = 0;   ///< sample_seed(options.seed, epoch, index).
  /// This sample's bytes in each output array of the batch: fields[i] is options.sample_fields[i] bytes long.
  std::vector<std::span<std::byte>> fields;
  /// The worker's own scratch (options.scratch_bytes, counted in the budget), e.g. for a decode stage.
  std::span<std::byte> scratch;
};

/// A stage run on each sample, in order: read, decode, augment. Any exception stops the pipeline and reaches the
/// consumer as a PipelineError naming the sample.
using SampleStage = std::function<void(Sample&)>;

/// A whole batch once every sample is in place: a collate stage that works across samples.
struct BatchInProgress {
  std::uint64_t epoch = 0;
  std::uint64_t sequence = 0;  ///< Position in delivery order, counted across epochs.
  std::size_t samples = 0;
  std::vector<std::span<std::byte>> fields;  ///< Each samples x sample_fields[i] bytes.
};
using CollateStage = std::function<void(BatchInProgress&)>;

struct PipelineOptions {
  std::uint64_t dataset_size = 0;
  std::size_t batch_size = 1;
  /// Bytes per sample of each output array, e.g. {28 * 28 * sizeof(float), sizeof(std::int64_t)} for images and
  /// labels. A batch stores each array contiguously (batch_size x bytes), as a collated tensor would.
  std::vector<std::size_t> sample_fields;
  std::size_t workers = 4;
  /// Most batches the pipeline owns at once (building, queued, held by the consumer, idle); 0: no count bound.
  /// Unlike Keras's max_queue_size this counts the batches workers are building, so it is a real memory bound.
  std::size_t max_batches = 0;
  /// Most bytes the pipeline owns at once; 0: no byte bound. With both bounds 0 the pipeline is unbounded.
  std::uint64_t max_bytes = 0;
  std::size_t scratch_bytes = 0;  ///< Per worker.
  bool ordered = true;            ///< Deliver in sequence; false: as batches complete.
  bool shuffle = false;           ///< A new permutation each epoch, drawn from (seed, epoch).
  bool drop_last = false;         ///< Skip an epoch's last, short batch.
  std::uint64_t seed = 0;
  std::uint64_t epochs = 1;  ///< 0: until cancel().
  /// Grow the number of buffers from 2 until the consumer waits less than 1% of its step time, or the bounds stop
  /// it; metrics().autotune says what it chose and why.
  bool autotune = false;
  /// Where batch buffers live: null for the C heap; runtime.device("cpu-pinned") builds batches in page-locked
  /// memory, so copies to a GPU run as DMA, asynchronously (release each batch with release_when(copy done), e.g.
  /// a cudaEventQuery of an event recorded after the copy). Must be host memory (cpu, cpu-pinned or one of their
  /// logical devices) and outlive every batch. Buffers are allocated once (tag "pipeline batches") and reused.
  Allocator* buffer_device = nullptr;
};

/// Bytes of one batch buffer for these options: each field's batch_size x sample_fields[i] bytes, rounded up to a
/// cache line. A budget of N batches is N x this plus workers x scratch_bytes (metrics().buffer_bytes reports the
/// same number). Throws InvalidArgument when it does not fit in 64 bits.
std::uint64_t batch_buffer_bytes(const PipelineOptions& options);

/// What the pipeline holds and how long each side waited.
struct PipelineMetrics {
  std::size_t queued = 0;            ///< Ready batches waiting for the consumer.
  std::size_t building = 0;          ///< Batches in workers.
  std::size_t held = 0;              ///< Batches the consumer holds.
  std::size_t idle = 0;              ///< Buffers idle in the pool.
  std::size_t parked = 0;            ///< Buffers waiting for a copy from them to complete.
  std::size_t buffer_limit = 0;      ///< Current cap on buffers (autotune moves it); SIZE_MAX when unbounded.
  std::uint64_t buffer_bytes = 0;    ///< Bytes of one batch buffer.
  std::uint64_t bytes_held = 0;      ///< Every byte the pipeline owns now, scratch included.
  std::uint64_t peak_bytes_held = 0;
  std::uint64_t byte_budget = 0;     ///< options.max_bytes.
  std::uint64_t buffers_allocated = 0;  ///< Buffer allocations so far: flat once the pool has warmed up.
  std::uint64_t batches_delivered = 0;
  std::chrono::nanoseconds producer_wait{0};  ///< Summed over workers: waiting for a free buffer.
  std::chrono::nanoseconds consumer_wait{0};  ///< Inside next(), waiting for a batch.
  std::chrono::nanoseconds consumer_step{0};  ///< Between next() calls: the consumer's own work.
  std::string autotune;                       ///< The choice and its reason; empty without autotune.
};

/// A failure in a stage, with the sample it happened on. cause() is the stage's own exception.
class PipelineError : public Error {
 public:
  PipelineError(const std::string& what, std::optional<std::uint64_t> sample_index, std::uint64_t epoch,
                std::exception_ptr cause);
  /// The dataset index of the failing sample; empty when the collate stage failed.
  std::optional<std::uint64_t> sample_index() const noexcept { return sample_index_; }
  std::uint64_t epoch() const noexcept { return epoch_; }
  std::exception_ptr cause() const noexcept { return cause_; }

 private:
  std::optional<std::uint64_t> sample_index_;
  std::uint64_t epoch_;
  std::exception_ptr cause_;
};

namespace pipeline_detail {
struct State;
struct Buffer;
}  // namespace pipeline_detail

/// A delivered batch. Its buffer goes back to the pool when the Batch is destroyed or released, so hold only the
/// batches you use: a consumer holding every buffer the bounds allow makes next() throw rather than wait forever.
class Batch {
 public:
  Batch() = default;
  Batch(Batch&& other) noexcept;
  Batch& operator=(Batch&& other) noexcept;
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;
  ~Batch();

  explicit operator bool() const noexcept { return buffer_ != nullptr; }
  std::uint64_t epoch() const noexcept { return epoch_; }
  std::uint64_t sequence() const noexcept { return sequence_; }
  std::size_t size() const noexcept { return samples_; }  ///< Samples; an epoch's last batch may be short.
  /// Output array i: size() x sample_fields[i] bytes.
  std::span<std::byte> field(std::size_t i) const;
  template <class T>
  std::span<T> field_as(std::size_t i) const {
    const auto bytes = field(i);
    return {reinterpret_cast<T*>(bytes.data()), bytes.size() / sizeof(T)};
  }

  /// Gives the buffer back now.
  void release() noexcept;
  /// Gives the buffer back, but keeps it out of use until `copy_done()` returns true: for an asynchronous copy that
  /// still reads it (a CUDA event query). The predicate is polled by workers that need a buffer.
  void release_when(std::function<bool()> copy_done);

 private:
  friend struct pipeline_detail::State;
  std::shared_ptr<pipeline_detail::State> state_;
  pipeline_detail::Buffer* buffer_ = nullptr;
  std::uint64_t epoch_ = 0;
  std::uint64_t sequence_ = 0;
  std::size_t samples_ = 0;
};

class Pipeline {
 public:
  /// Starts the workers. Throws InvalidArgument for options that cannot work (no stages, a zero size, a budget
  /// smaller than one batch plus the workers' scratch), naming the fix.
  Pipeline(PipelineOptions options, std::vector<SampleStage> stages, CollateStage collate = {});
  /// Cancels and joins the workers. Batches still held stay valid until destroyed.
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  /// The next batch; empty once every epoch is delivered or after cancel(). Throws the PipelineError of a failed
  /// stage (in order: the batches before it are delivered first), and InvalidState when the consumer holds every
  /// buffer the bounds allow.
  std::optional<Batch> next();
  /// Stops the workers after the sample each is on; next() then returns empty. Safe from any thread.
  void cancel() noexcept;
  PipelineMetrics metrics() const;
  std::uint64_t batches_per_epoch() const noexcept;

 private:
  std::shared_ptr<pipeline_detail::State> state_;
};

}  // namespace plimsoll
