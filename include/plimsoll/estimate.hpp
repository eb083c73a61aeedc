#pragma once
// How much memory the input batches of a data pipeline take, before anything runs: one batch, the prefetch queue,
// the batches workers are building, and the deepest queue a memory budget allows (docs/estimate.md).
// All sizes are exact byte counts; every product is checked, so a shape too large for 64 bits is an error,
// never a wrapped number.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace plimsoll {

/// Element types of input tensors.
enum class DType { float32, float16, bfloat16, uint8, int64 };

/// Parses a dtype name: float32, float16, bfloat16, uint8, int64, or the aliases fp32, fp16, bf16. Case is
/// ignored. Throws InvalidArgument listing the accepted names otherwise.
DType parse_dtype(std::string_view name);

/// The canonical name ("float32" for DType::float32).
std::string_view to_string(DType dtype) noexcept;

/// Bytes per element: 4, 2, 2, 1, 8.
std::uint64_t dtype_bytes(DType dtype) noexcept;

/// The shape of one sample (without the batch dimension), e.g. {224, 224, 3}.
struct BatchShape {
  std::vector<std::uint64_t> dims;

  /// The product of the dimensions. Throws InvalidArgument if it does not fit in 64 bits.
  std::uint64_t elements() const;
  /// "224x224x3".
  std::string to_string() const;
};

/// Parses a sample shape written as dimensions joined by 'x': "224x224x3", "3x224x224", "512". Every dimension is
/// a whole number of at least 1. Throws InvalidArgument naming the bad part ("224x", "0x3", "abc", a product
/// of 2^64 or more) and the expected form.
BatchShape parse_shape(std::string_view text);

/// Parses a whole number given for the option `name` (such as "--batch"), at least `minimum`. Throws
/// InvalidArgument naming the option and the value for negative, fractional, non-numeric or too large text.
std::uint64_t parse_count(std::string_view text, std::string_view name, std::uint64_t minimum = 0);

/// A prefetching input pipeline: `workers` each build one batch while up to `queue_depth` finished batches
/// wait in a queue, and the consumer (the training step) holds one more.
struct BatchPipeline {
  BatchShape sample;
  std::uint64_t batch = 1;  ///< samples per batch, at least 1
  DType dtype = DType::float32;
  std::uint64_t queue_depth = 10;
  std::uint64_t workers = 4;
  std::optional<std::uint64_t> budget;  ///< bytes the pipeline may hold, if there is a limit
};

/// What a pipeline holds, in bytes.
struct BatchEstimate {
  std::uint64_t batch_bytes = 0;      ///< elements x batch x dtype size
  std::uint64_t queue_bytes = 0;      ///< queue_depth x batch_bytes
  std::uint64_t in_flight_bytes = 0;  ///< workers x batch_bytes
  std::uint64_t consumer_bytes = 0;   ///< the batch the consumer holds: batch_bytes
  std::uint64_t total_bytes = 0;      ///< queue + in flight + consumer
  /// With a budget: the deepest queue that fits next to the in-flight and consumer batches; 0 when not even a
  /// queue of one fits (see budget_fits_pipeline). Empty without a budget.
  std::optional<std::uint64_t> max_queue_for_budget;
  /// With a budget: whether the in-flight and consumer batches alone fit (a queue of 0). Empty without a budget.
  std::optional<bool> budget_fits_pipeline;
};

/// The bytes of `pipeline`. Throws InvalidArgument for a batch of 0, a shape that is empty or has a 0, or any total
/// of 2^64 bytes or more.
BatchEstimate estimate_batch(const BatchPipeline& pipeline);

/// Input memory of square images, the table people work out by hand: bytes[r][b] = resolutions[r]^2 x channels
/// x batches[b] x dtype size.
struct InputMemoryTable {
  DType dtype = DType::float32;
  std::uint64_t channels = 3;
  std::vector<std::uint64_t> resolutions;  ///< 32, 64, 128, 224, 256, 512, 1024
  std::vector<std::uint64_t> batches;      ///< 32, 64, 128, ..., 65536
  std::vector<std::vector<std::uint64_t>> bytes;
};

/// The table for `dtype` and `channels` (at least 1). Throws InvalidArgument for 0 channels or a count so large
/// a cell reaches 2^64 bytes.
InputMemoryTable input_memory_table(DType dtype, std::uint64_t channels = 3);

}  // namespace plimsoll
