// A worker: take a free buffer, claim the next batch, run every stage on every sample straight into the buffer,
// then hand the batch to the consumer. The lock is held only to take and to hand over, never while building.
#include <fmt/format.h>

#include <algorithm>

#include "pipeline/pipeline_state.hpp"

namespace plimsoll::pipeline_detail {
namespace {

// While buffers are parked behind an asynchronous copy nobody signals when it completes, so waiters poll.
constexpr auto kParkedPollInterval = std::chrono::microseconds(100);

std::string describe(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an exception not derived from std::exception";
  }
}

}  // namespace

void State::work() noexcept {
  try {
    build_batches();
  } catch (...) {
    // Out of memory for the worker's scratch: the pipeline stops and next() reports it.
    {
      std::lock_guard lock(mutex);
      if (!worker_failure)
        worker_failure = std::make_exception_ptr(
            Error(fmt::format("pipeline: a worker could not start: {}", describe(std::current_exception()))));
      failed = true;
    }
    batch_ready.notify_all();
    buffer_freed.notify_all();
  }
}

void State::build_batches() {
  std::vector<std::byte> scratch(options.scratch_bytes);
  const std::size_t field_count = options.sample_fields.size();
  Sample sample;
  sample.fields.resize(field_count);
  sample.scratch = scratch;
  BatchInProgress batch;
  batch.fields.resize(field_count);

  while (true) {
    Buffer* buffer = nullptr;
    std::uint64_t sequence = 0;
    std::shared_ptr<const std::vector<std::uint64_t>> epoch_visits;
    {
      std::unique_lock lock(mutex);
      try {
        const auto waiting_since = Clock::now();
        while (true) {
          if (cancelled.load(std::memory_order_relaxed) || failed ||
              (total_batches != 0 && next_sequence >= total_batches))
            return;
          buffer = pool.try_acquire();
          if (buffer != nullptr) break;
          if (pool.has_parked())
            buffer_freed.wait_for(lock, kParkedPollInterval);
          else
            buffer_freed.wait(lock);
        }
        producer_wait += Clock::now() - waiting_since;
        peak_bytes = std::max(peak_bytes, bytes_held());
        if (finished.capacity() < pool.owned()) finished.reserve(pool.owned());
        const std::uint64_t epoch = next_sequence / batches_per_epoch;
        if (epoch != order_epoch) {
          order = std::make_shared<const std::vector<std::uint64_t>>(
              epoch_order(options.dataset_size, options.shuffle, options.seed, epoch));
          order_epoch = epoch;
        }
      } catch (...) {
        // Out of host memory for a buffer or an epoch's order: nothing was claimed, so the pipeline stops and
        // next() reports it.
        if (buffer != nullptr) pool.give_back(buffer);
        if (!worker_failure)
          worker_failure = std::make_exception_ptr(Error(fmt::format(
              "pipeline: a worker could not get memory for a batch buffer of {} bytes: {}; lower batch_size or "
              "max_bytes / max_batches",
              pool.buffer_bytes(), describe(std::current_exception()))));
        failed = true;
        lock.unlock();
        batch_ready.notify_all();
        buffer_freed.notify_all();
        return;
      }
      sequence = next_sequence++;
      epoch_visits = order;
      ++building;
    }

    FinishedBatch result;
    result.sequence = sequence;
    result.buffer = buffer;
    result.epoch = sequence / batches_per_epoch;
    const std::uint64_t first = (sequence % batches_per_epoch) * options.batch_size;
    result.samples = static_cast<std::size_t>(std::min<std::uint64_t>(options.batch_size, options.dataset_size - first));
    sample.epoch = result.epoch;
    std::byte* const base = buffer->bytes.get();
    try {
      for (std::size_t slot = 0; slot < result.samples; ++slot) {
        if (cancelled.load(std::memory_order_relaxed)) break;
        sample.index = (*epoch_visits)[first + slot];
        sample.slot = slot;
        sample.seed = sample_seed(options.seed, sample.epoch, sample.index);
        for (std::size_t f = 0; f < field_count; ++f)
          sample.fields[f] = {base + field_offsets[f] + slot * options.sample_fields[f], options.sample_fields[f]};
        try {
          for (const auto& stage : stages) stage(sample);
        } catch (...) {
          const auto cause = std::current_exception();
          throw PipelineError(fmt::format("pipeline: a stage failed on sample {} (epoch {}, batch {}): {}",
                                          sample.index, sample.epoch, sequence, describe(cause)),
                              sample.index, sample.epoch, cause);
        }
      }
      if (collate && !cancelled.load(std::memory_order_relaxed)) {
        batch.epoch = result.epoch;
        batch.sequence = sequence;
        batch.samples = result.samples;
        for (std::size_t f = 0; f < field_count; ++f)
          batch.fields[f] = {base + field_offsets[f], result.samples * options.sample_fields[f]};
        try {
          collate(batch);
        } catch (...) {
          const auto cause = std::current_exception();
          throw PipelineError(fmt::format("pipeline: the collate stage failed on batch {} (epoch {}): {}", sequence,
                                          result.epoch, describe(cause)),
                              std::nullopt, result.epoch, cause);
        }
      }
    } catch (const PipelineError&) {
      result.error = std::current_exception();
    }

    {
      std::lock_guard lock(mutex);
      --building;
      if (result.error) failed = true;
      finished.push_back(result);
      std::push_heap(finished.begin(), finished.end(), later);
    }
    batch_ready.notify_one();
    if (result.error) buffer_freed.notify_all();  // the other workers stop claiming
  }
}

}  // namespace plimsoll::pipeline_detail
