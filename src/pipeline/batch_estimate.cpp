// The bytes a prefetching input pipeline holds: finished batches waiting in the queue, the batches workers are
// building, and the one the training step is using (docs/estimate.md has the model and the formula).
#include <cstdint>
#include <optional>
#include <string_view>

#include <fmt/format.h>

#include "plimsoll/error.hpp"
#include "plimsoll/estimate.hpp"
#include "plimsoll/size.hpp"
#include "util/checked_math.hpp"

namespace plimsoll {
namespace {

// `count` batches of `batch_bytes`, or an error naming the count (`what`) to lower.
std::uint64_t batches_bytes(std::uint64_t count, std::uint64_t batch_bytes, std::string_view what) {
  const auto bytes = util::checked_multiply(count, batch_bytes);
  if (!bytes) {
    throw InvalidArgument(fmt::format("{} {} x {} per batch is 2^64 bytes or more; lower the {}", what, count,
                                      format_size(batch_bytes), what));
  }
  return *bytes;
}

std::uint64_t one_batch_bytes(const BatchPipeline& pipeline) {
  if (pipeline.sample.dims.empty()) {
    throw InvalidArgument("the sample shape has no dimensions; give at least one, e.g. 224x224x3");
  }
  for (std::uint64_t dim : pipeline.sample.dims) {
    // parse_shape never gives a 0, but a shape built in code may: it would make a batch of 0 bytes.
    if (dim == 0) {
      throw InvalidArgument(fmt::format("the sample shape {} has a dimension of 0; every dimension must be at "
                                        "least 1",
                                        pipeline.sample.to_string()));
    }
  }
  if (pipeline.batch == 0) throw InvalidArgument("batch size 0: a batch holds at least one sample; give 1 or more");
  const auto sample_bytes = util::checked_multiply(pipeline.sample.elements(), dtype_bytes(pipeline.dtype));
  const auto bytes = sample_bytes ? util::checked_multiply(*sample_bytes, pipeline.batch) : std::nullopt;
  if (!bytes) {
    throw InvalidArgument(fmt::format("a batch of {} samples of shape {} in {} is 2^64 bytes or more; lower the "
                                      "batch size or the shape",
                                      pipeline.batch, pipeline.sample.to_string(), to_string(pipeline.dtype)));
  }
  return *bytes;
}

}  // namespace

BatchEstimate estimate_batch(const BatchPipeline& pipeline) {
  BatchEstimate estimate;
  estimate.batch_bytes = one_batch_bytes(pipeline);
  estimate.queue_bytes = batches_bytes(pipeline.queue_depth, estimate.batch_bytes, "queue depth");
  estimate.in_flight_bytes = batches_bytes(pipeline.workers, estimate.batch_bytes, "workers");
  estimate.consumer_bytes = estimate.batch_bytes;

  // Without the queue: what the pipeline holds however shallow its queue is.
  const auto fixed_bytes = util::checked_add(estimate.in_flight_bytes, estimate.consumer_bytes);
  const auto total = fixed_bytes ? util::checked_add(*fixed_bytes, estimate.queue_bytes) : std::nullopt;
  if (!total) {
    throw InvalidArgument(fmt::format("the pipeline would hold 2^64 bytes or more ({} queued + {} workers + 1 "
                                      "batches of {}); lower the queue depth or the workers",
                                      pipeline.queue_depth, pipeline.workers, format_size(estimate.batch_bytes)));
  }
  estimate.total_bytes = *total;

  if (pipeline.budget) {
    const bool fits = *pipeline.budget >= *fixed_bytes;
    estimate.budget_fits_pipeline = fits;
    estimate.max_queue_for_budget = fits ? (*pipeline.budget - *fixed_bytes) / estimate.batch_bytes : 0;
  }
  return estimate;
}

}  // namespace plimsoll
