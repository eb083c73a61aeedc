// Pipeline: starts the workers over a shared State, and reports what it holds.
#include "plimsoll/pipeline.hpp"

#include "pipeline/pipeline_state.hpp"

namespace plimsoll {

PipelineError::PipelineError(const std::string& what, std::optional<std::uint64_t> sample_index,
                             std::uint64_t epoch, std::exception_ptr cause)
    : Error(what), sample_index_(sample_index), epoch_(epoch), cause_(std::move(cause)) {}

Pipeline::Pipeline(PipelineOptions options, std::vector<SampleStage> stages, CollateStage collate)
    : state_(std::make_shared<pipeline_detail::State>(std::move(options), std::move(stages), std::move(collate))) {
  auto& state = *state_;
  try {
    for (std::size_t i = 0; i < state.options.workers; ++i) state.workers.emplace_back([&state] { state.work(); });
  } catch (...) {
    cancel();
    for (auto& worker : state.workers) worker.join();
    throw;
  }
}

Pipeline::~Pipeline() {
  cancel();
  for (auto& worker : state_->workers) worker.join();
}

std::optional<Batch> Pipeline::next() { return state_->next(state_); }

void Pipeline::cancel() noexcept {
  {
    std::lock_guard lock(state_->mutex);
    state_->cancelled.store(true, std::memory_order_relaxed);
  }
  state_->buffer_freed.notify_all();
  state_->batch_ready.notify_all();
}

std::uint64_t Pipeline::batches_per_epoch() const noexcept { return state_->batches_per_epoch; }

PipelineMetrics Pipeline::metrics() const { return state_->metrics(); }

PipelineMetrics pipeline_detail::State::metrics() const {
  std::lock_guard lock(mutex);
  PipelineMetrics m;
  m.queued = finished.size();
  m.building = building;
  m.held = held;
  m.idle = pool.idle();
  m.parked = pool.parked();
  m.buffer_limit = pool.limit();
  m.buffer_bytes = pool.buffer_bytes();
  m.bytes_held = bytes_held();
  m.peak_bytes_held = peak_bytes;
  m.byte_budget = options.max_bytes;
  m.buffers_allocated = pool.allocations();
  m.batches_delivered = delivered;
  m.producer_wait = producer_wait;
  m.consumer_wait = consumer_wait;
  m.consumer_step = consumer_step;
  m.autotune = autotune.report();  // empty unless autotune observed a delivery
  return m;
}

}  // namespace plimsoll
