#pragma once
// What the pipeline's workers, its consumer and its delivered batches share. Every field below `mutex` is guarded
// by it; `cancelled` is also atomic so a worker can stop between samples without taking the lock.
//
// Invariants, under the mutex:
//  - pool.owned() == building + finished.size() + held + pool.idle() + pool.parked(): every buffer is in exactly
//    one place, and bytes_held() == pool.owned() * buffer_bytes + scratch_bytes never exceeds options.max_bytes.
//  - Sequences are claimed in order (next_sequence) by workers that already hold a buffer, so the batch the
//    consumer waits for in ordered mode is always either finished or being built: waiting cannot deadlock unless
//    the consumer itself holds every buffer, which next() detects and reports.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "pipeline/batch_buffer_pool.hpp"
#include "pipeline/depth_autotune.hpp"
#include "plimsoll/pipeline.hpp"

namespace plimsoll::pipeline_detail {

using Clock = std::chrono::steady_clock;

struct FinishedBatch {
  std::uint64_t sequence = 0;
  Buffer* buffer = nullptr;
  std::uint64_t epoch = 0;
  std::size_t samples = 0;
  std::exception_ptr error;  ///< A PipelineError; the buffer is returned to the pool when it is delivered.
};

/// Where each output array starts in a batch buffer, then the buffer's size (batch_buffer_bytes).
std::vector<std::uint64_t> offsets_of(const PipelineOptions& options);

struct State {
  State(PipelineOptions options, std::vector<SampleStage> stages, CollateStage collate);

  // Fixed at construction.
  const PipelineOptions options;
  const std::vector<SampleStage> stages;
  const CollateStage collate;
  const std::uint64_t batches_per_epoch;
  const std::uint64_t total_batches;  ///< 0 when epochs == 0 (until cancelled).
  const std::vector<std::uint64_t> field_offsets;  ///< Where each output array starts in a buffer.
  const std::uint64_t scratch_bytes;               ///< All workers' scratch.
  std::vector<std::thread> workers;                ///< Started and joined by Pipeline.
  std::atomic<bool> cancelled{false};

  mutable std::mutex mutex;
  std::condition_variable buffer_freed;  // workers wait here
  std::condition_variable batch_ready;   // the consumer waits here
  BatchBufferPool pool;
  DepthAutotune autotune;
  std::uint64_t next_sequence = 0;
  std::uint64_t order_epoch = UINT64_MAX;
  std::shared_ptr<const std::vector<std::uint64_t>> order;
  /// A min-heap on sequence (std::push_heap with `later`). Its capacity follows pool.owned(), which bounds its
  /// size, so a steady pipeline hands batches over without allocating.
  std::vector<FinishedBatch> finished;
  std::size_t building = 0;
  std::size_t held = 0;
  bool failed = false;  ///< A stage threw: no new batches are claimed.
  std::exception_ptr delivered_failure;
  std::exception_ptr worker_failure;  ///< Not about a sample: a worker could not get memory to start a batch.
  std::uint64_t next_delivery = 0;
  std::uint64_t delivered = 0;
  std::uint64_t peak_bytes = 0;
  std::chrono::nanoseconds producer_wait{0};
  std::chrono::nanoseconds consumer_wait{0};
  std::chrono::nanoseconds consumer_step{0};
  std::optional<Clock::time_point> last_delivery;

  static bool later(const FinishedBatch& a, const FinishedBatch& b) noexcept { return a.sequence > b.sequence; }
  std::uint64_t bytes_held() const noexcept { return pool.owned() * pool.buffer_bytes() + scratch_bytes; }
  void work() noexcept;  ///< A worker thread's body.
  void build_batches();
  std::optional<Batch> next(const std::shared_ptr<State>& self);
  void release(Buffer* buffer, std::function<bool()> copy_done) noexcept;
  PipelineMetrics metrics() const;
};

}  // namespace plimsoll::pipeline_detail
