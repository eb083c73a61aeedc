// The pipeline's fixed sizes, and the checks that options can work before any thread starts.
#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "pipeline/pipeline_state.hpp"
#include "plimsoll/allocator.hpp"
#include "plimsoll/size.hpp"
#include "util/checked_math.hpp"

namespace plimsoll::pipeline_detail {
namespace {

constexpr std::uint64_t kBufferAlignment = 64;

std::uint64_t checked_multiply(std::uint64_t a, std::uint64_t b, const char* what) {
  if (const auto product = util::checked_multiply(a, b)) return *product;
  throw InvalidArgument(fmt::format("{} overflow 64 bits ({} x {}); lower the sizes", what, a, b));
}

std::uint64_t checked_add(std::uint64_t a, std::uint64_t b, const char* what) {
  if (const auto sum = util::checked_add(a, b)) return *sum;
  throw InvalidArgument(fmt::format("{} overflow 64 bits ({} + {}); lower the sizes", what, a, b));
}

std::uint64_t checked_round_up(std::uint64_t value, std::uint64_t multiple, const char* what) {
  if (const auto rounded = util::checked_round_up(value, multiple)) return *rounded;
  throw InvalidArgument(
      fmt::format("{} overflow 64 bits ({} rounded up to a multiple of {}); lower the sizes", what, value, multiple));
}

void check_shape(const PipelineOptions& options, const std::vector<SampleStage>& stages) {
  if (options.dataset_size == 0) throw InvalidArgument("pipeline: dataset_size is 0; give the number of samples");
  if (options.batch_size == 0) throw InvalidArgument("pipeline: batch_size is 0; give at least 1");
  if (options.workers == 0) throw InvalidArgument("pipeline: workers is 0; give at least 1 worker thread");
  if (options.sample_fields.empty())
    throw InvalidArgument(
        "pipeline: sample_fields is empty; give the bytes per sample of each output array, e.g. {784 * 4, 8}");
  for (std::size_t i = 0; i < options.sample_fields.size(); ++i)
    if (options.sample_fields[i] == 0)
      throw InvalidArgument(fmt::format("pipeline: sample_fields[{}] is 0 bytes; every field needs at least 1", i));
  if (stages.empty()) throw InvalidArgument("pipeline: no stages; give at least one callable that fills a sample");
  for (std::size_t i = 0; i < stages.size(); ++i)
    if (!stages[i]) throw InvalidArgument(fmt::format("pipeline: stage {} is an empty std::function", i));
  if (options.buffer_device != nullptr && options.buffer_device->description().name.rfind("cpu", 0) != 0)
    throw InvalidArgument(fmt::format("pipeline: buffer_device is {}, but workers write batches through host "
                                      "pointers; give cpu-pinned (for copies to a GPU) or cpu",
                                      options.buffer_device->description().name));
  if (options.drop_last && options.dataset_size < options.batch_size)
    throw InvalidArgument(fmt::format(
        "pipeline: drop_last with {} samples and batch_size {} leaves no batch at all; lower batch_size or turn "
        "drop_last off",
        options.dataset_size, options.batch_size));
}

}  // namespace

std::vector<std::uint64_t> offsets_of(const PipelineOptions& options) {
  std::vector<std::uint64_t> offsets;
  std::uint64_t at = 0;
  for (const std::size_t field : options.sample_fields) {
    offsets.push_back(at);
    // Each array starts cache-line aligned, as the buffer does.
    const std::uint64_t bytes = checked_multiply(field, options.batch_size, "pipeline: batch bytes");
    at = checked_add(at, bytes, "pipeline: batch bytes");
    at = checked_round_up(at, kBufferAlignment, "pipeline: batch bytes");
  }
  offsets.push_back(at);  // the buffer's size
  return offsets;
}

namespace {

// How many buffers the bounds allow; throws when not even one batch fits.
std::size_t buffer_cap(const PipelineOptions& options, std::uint64_t buffer_bytes, std::uint64_t scratch_bytes) {
  std::uint64_t cap = options.max_batches != 0 ? options.max_batches : std::numeric_limits<std::size_t>::max();
  if (options.max_bytes != 0) {
    const std::uint64_t needed = checked_add(buffer_bytes, scratch_bytes, "pipeline: bytes needed");
    if (options.max_bytes < needed)
      throw InvalidArgument(fmt::format(
          "pipeline: max_bytes of {} cannot hold one batch buffer ({}) plus {} workers' scratch ({}); raise "
          "max_bytes to at least {} bytes, or lower batch_size, workers or scratch_bytes",
          format_size(options.max_bytes), format_size(buffer_bytes), options.workers,
          format_size(scratch_bytes), needed));
    cap = std::min(cap, (options.max_bytes - scratch_bytes) / buffer_bytes);
  }
  return static_cast<std::size_t>(cap);
}

std::uint64_t batches_per_epoch_of(const PipelineOptions& options) {
  return options.drop_last ? options.dataset_size / options.batch_size
                           : (options.dataset_size + options.batch_size - 1) / options.batch_size;
}

}  // namespace

State::State(PipelineOptions options_in, std::vector<SampleStage> stages_in, CollateStage collate_in)
    : options((check_shape(options_in, stages_in), std::move(options_in))),
      stages(std::move(stages_in)),
      collate(std::move(collate_in)),
      batches_per_epoch(batches_per_epoch_of(options)),
      total_batches(options.epochs == 0 ? 0
                                        : checked_multiply(batches_per_epoch, options.epochs, "pipeline: batches")),
      field_offsets(offsets_of(options)),
      scratch_bytes(checked_multiply(options.scratch_bytes, options.workers, "pipeline: scratch bytes")),
      pool(field_offsets.back(), buffer_cap(options, field_offsets.back(), scratch_bytes), options.buffer_device),
      autotune(pool.limit(), options.workers) {
  if (options.autotune && pool.limit() > DepthAutotune::kStartDepth) {
    // Autotune starts low and grows, so the pool is built with the start depth and raised later.
    pool = BatchBufferPool(field_offsets.back(), DepthAutotune::kStartDepth, options.buffer_device);
  }
  peak_bytes = bytes_held();
}

}  // namespace plimsoll::pipeline_detail

namespace plimsoll {

std::uint64_t batch_buffer_bytes(const PipelineOptions& options) {
  return pipeline_detail::offsets_of(options).back();
}

}  // namespace plimsoll
