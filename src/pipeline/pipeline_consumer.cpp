// The consumer's side: next() hands over finished batches (in sequence, or as they finish), and a Batch gives its
// buffer back when the consumer is done with it.
#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "pipeline/pipeline_state.hpp"

namespace plimsoll::pipeline_detail {

std::optional<Batch> State::next(const std::shared_ptr<State>& self) {
  std::unique_lock lock(mutex);
  const auto called = Clock::now();
  if (last_delivery) consumer_step += called - *last_delivery;
  while (true) {
    if (delivered_failure) std::rethrow_exception(delivered_failure);
    if (worker_failure) std::rethrow_exception(worker_failure);
    // Cancelled first: a batch a cancelled worker cut short must not be delivered.
    if (cancelled.load(std::memory_order_relaxed)) {
      last_delivery.reset();
      return std::nullopt;
    }
    const bool deliverable = !finished.empty() && (!options.ordered || finished.front().sequence == next_delivery);
    if (deliverable) {
      std::pop_heap(finished.begin(), finished.end(), later);
      const FinishedBatch ready = finished.back();
      finished.pop_back();
      if (ready.error) {
        delivered_failure = ready.error;
        pool.give_back(ready.buffer);
        buffer_freed.notify_all();
        std::rethrow_exception(ready.error);
      }
      next_delivery = ready.sequence + 1;
      ++delivered;
      ++held;
      const auto now = Clock::now();
      const auto waited = now - called;
      consumer_wait += waited;
      if (options.autotune) {
        const std::size_t depth = autotune.observe(
            waited, last_delivery ? called - *last_delivery : std::chrono::nanoseconds{0}, producer_wait, pool.limit());
        if (depth > pool.limit()) {
          pool.raise_limit(depth);
          buffer_freed.notify_all();
        }
      }
      last_delivery = now;
      Batch batch;
      batch.state_ = self;
      batch.buffer_ = ready.buffer;
      batch.epoch_ = ready.epoch;
      batch.sequence_ = ready.sequence;
      batch.samples_ = ready.samples;
      return batch;
    }
    if (total_batches != 0 && delivered == total_batches) {
      last_delivery.reset();
      return std::nullopt;
    }
    if (held > 0 && held >= pool.limit())
      throw InvalidState(fmt::format(
          "pipeline: the consumer holds all {} batch buffers the bounds allow, so no worker can build the next "
          "batch; release or destroy a Batch before calling next(), or raise max_batches / max_bytes",
          held));
    batch_ready.wait(lock);
  }
}

void State::release(Buffer* buffer, std::function<bool()> copy_done) noexcept {
  {
    std::lock_guard lock(mutex);
    --held;
    if (copy_done)
      pool.park(buffer, std::move(copy_done));
    else
      pool.give_back(buffer);
  }
  buffer_freed.notify_one();
}

}  // namespace plimsoll::pipeline_detail

namespace plimsoll {

Batch::Batch(Batch&& other) noexcept
    : state_(std::move(other.state_)),
      buffer_(std::exchange(other.buffer_, nullptr)),
      epoch_(other.epoch_),
      sequence_(other.sequence_),
      samples_(other.samples_) {}

Batch& Batch::operator=(Batch&& other) noexcept {
  if (this != &other) {
    release();
    state_ = std::move(other.state_);
    buffer_ = std::exchange(other.buffer_, nullptr);
    epoch_ = other.epoch_;
    sequence_ = other.sequence_;
    samples_ = other.samples_;
  }
  return *this;
}

Batch::~Batch() { release(); }

std::span<std::byte> Batch::field(std::size_t i) const {
  if (buffer_ == nullptr) throw InvalidState("Batch::field: this batch was released or moved from");
  const auto& fields = state_->options.sample_fields;
  if (i >= fields.size())
    throw InvalidArgument(fmt::format("Batch::field({}): the pipeline has {} fields", i, fields.size()));
  return {buffer_->bytes.get() + state_->field_offsets[i], samples_ * fields[i]};
}

void Batch::release() noexcept {
  if (buffer_ == nullptr) return;
  state_->release(std::exchange(buffer_, nullptr), nullptr);
  state_.reset();
}

void Batch::release_when(std::function<bool()> copy_done) {
  if (buffer_ == nullptr) throw InvalidState("Batch::release_when: this batch was released or moved from");
  if (!copy_done) throw InvalidArgument("Batch::release_when: the predicate is empty; use release()");
  state_->release(std::exchange(buffer_, nullptr), std::move(copy_done));
  state_.reset();
}

}  // namespace plimsoll
