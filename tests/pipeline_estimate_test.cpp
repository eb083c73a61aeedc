// The estimator's numbers: bytes of a batch, of the queue and the workers' batches, the deepest queue a budget
// allows, the resolution x batch table, and overflow reported instead of wrapped.
#include <cstdint>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "plimsoll/error.hpp"
#include "plimsoll/estimate.hpp"

namespace plimsoll {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr std::uint64_t kImageNetBatch = 224ull * 224 * 3 * 4 * 128;  // 77,070,336 bytes

BatchPipeline imagenet_pipeline() {
  BatchPipeline pipeline;
  pipeline.sample = parse_shape("224x224x3");
  pipeline.batch = 128;
  pipeline.dtype = DType::float32;
  pipeline.queue_depth = 10;
  pipeline.workers = 4;
  return pipeline;
}

std::string rejection_of(const BatchPipeline& pipeline) {
  try {
    const BatchEstimate estimate = estimate_batch(pipeline);
    ADD_FAILURE() << "accepted with a total of " << estimate.total_bytes;
  } catch (const InvalidArgument& error) {
    return error.what();
  }
  return {};
}

TEST(EstimateBatch, ImageNetBatchOfFloat32) {
  const BatchEstimate estimate = estimate_batch(imagenet_pipeline());
  EXPECT_EQ(estimate.batch_bytes, 77'070'336u);
  EXPECT_EQ(estimate.batch_bytes, kImageNetBatch);
  EXPECT_EQ(estimate.queue_bytes, 770'703'360u);
  EXPECT_EQ(estimate.in_flight_bytes, 308'281'344u);
  EXPECT_EQ(estimate.consumer_bytes, 77'070'336u);
  EXPECT_EQ(estimate.total_bytes, 1'156'055'040u);  // 10 + 4 + 1 batches
  EXPECT_FALSE(estimate.max_queue_for_budget.has_value());
  EXPECT_FALSE(estimate.budget_fits_pipeline.has_value());
}

TEST(EstimateBatch, DTypeSizeScalesTheBatch) {
  BatchPipeline pipeline = imagenet_pipeline();
  pipeline.dtype = DType::float16;
  EXPECT_EQ(estimate_batch(pipeline).batch_bytes, kImageNetBatch / 2);
  pipeline.dtype = DType::bfloat16;
  EXPECT_EQ(estimate_batch(pipeline).batch_bytes, kImageNetBatch / 2);
  pipeline.dtype = DType::uint8;
  EXPECT_EQ(estimate_batch(pipeline).batch_bytes, kImageNetBatch / 4);
  pipeline.dtype = DType::int64;
  EXPECT_EQ(estimate_batch(pipeline).batch_bytes, kImageNetBatch * 2);
}

TEST(EstimateBatch, NoQueueAndNoWorkersLeaveTheConsumersBatch) {
  BatchPipeline pipeline = imagenet_pipeline();
  pipeline.queue_depth = 0;
  pipeline.workers = 0;
  const BatchEstimate estimate = estimate_batch(pipeline);
  EXPECT_EQ(estimate.queue_bytes, 0u);
  EXPECT_EQ(estimate.in_flight_bytes, 0u);
  EXPECT_EQ(estimate.total_bytes, kImageNetBatch);
}

TEST(EstimateBatch, EightGiBHoldsAQueueOf106) {
  BatchPipeline pipeline = imagenet_pipeline();
  pipeline.budget = 8ull << 30;
  const BatchEstimate estimate = estimate_batch(pipeline);
  // (8 GiB - 5 batches for the workers and the consumer) / one batch = 106.45.
  EXPECT_EQ(estimate.max_queue_for_budget, 106u);
  EXPECT_EQ(estimate.budget_fits_pipeline, true);
}

TEST(EstimateBatch, BudgetThatFitsExactlyHoldsTheWholeQueue) {
  BatchPipeline pipeline = imagenet_pipeline();
  pipeline.budget = 15 * kImageNetBatch;
  EXPECT_EQ(estimate_batch(pipeline).max_queue_for_budget, 10u);
  pipeline.budget = 15 * kImageNetBatch - 1;
  EXPECT_EQ(estimate_batch(pipeline).max_queue_for_budget, 9u);
}

TEST(EstimateBatch, BudgetForWorkersAndConsumerOnlyHoldsNoQueue) {
  BatchPipeline pipeline = imagenet_pipeline();
  pipeline.budget = 5 * kImageNetBatch;
  BatchEstimate estimate = estimate_batch(pipeline);
  EXPECT_EQ(estimate.max_queue_for_budget, 0u);
  EXPECT_EQ(estimate.budget_fits_pipeline, true);

  pipeline.budget = 5 * kImageNetBatch - 1;
  estimate = estimate_batch(pipeline);
  EXPECT_EQ(estimate.max_queue_for_budget, 0u);
  EXPECT_EQ(estimate.budget_fits_pipeline, false);
}

TEST(EstimateBatch, BudgetSmallerThanOneBatchHoldsNothing) {
  BatchPipeline pipeline = imagenet_pipeline();
  pipeline.budget = kImageNetBatch - 1;
  const BatchEstimate estimate = estimate_batch(pipeline);
  EXPECT_EQ(estimate.max_queue_for_budget, 0u);
  EXPECT_EQ(estimate.budget_fits_pipeline, false);
  pipeline.budget = 0;
  EXPECT_EQ(estimate_batch(pipeline).max_queue_for_budget, 0u);
}

TEST(EstimateBatch, BatchOfZeroAndEmptyOrZeroShapeAreRejected) {
  BatchPipeline pipeline = imagenet_pipeline();
  pipeline.batch = 0;
  EXPECT_THAT(rejection_of(pipeline), HasSubstr("batch size 0"));
  pipeline = imagenet_pipeline();
  pipeline.sample.dims.clear();
  EXPECT_THAT(rejection_of(pipeline), HasSubstr("no dimensions"));
  pipeline.sample.dims = {224, 0, 3};  // built in code, not parsed: a 0-byte batch would divide by zero
  pipeline.budget = 1;
  EXPECT_THAT(rejection_of(pipeline), HasSubstr("224x0x3 has a dimension of 0"));
}

TEST(EstimateBatch, OverflowIsReportedNeverWrapped) {
  BatchPipeline pipeline = imagenet_pipeline();
  // 2^62 float32 elements are 2^64 bytes in a batch of one.
  pipeline.sample = parse_shape("4611686018427387904");
  pipeline.batch = 1;
  EXPECT_THAT(rejection_of(pipeline), HasSubstr("a batch of 1 samples of shape 4611686018427387904 in float32"));

  // One batch is 2^62 bytes: a queue of 4 is 2^64.
  pipeline.sample = parse_shape("1152921504606846976");  // 2^60
  pipeline.queue_depth = 4;
  pipeline.workers = 0;
  EXPECT_THAT(rejection_of(pipeline), HasSubstr("queue depth 4"));
  pipeline.queue_depth = 0;
  pipeline.workers = 4;
  EXPECT_THAT(rejection_of(pipeline), HasSubstr("workers 4"));
  // Each part fits (2^63, 2^62, 2^62), their sum is 2^64.
  pipeline.queue_depth = 2;
  pipeline.workers = 1;
  EXPECT_THAT(rejection_of(pipeline), HasSubstr("the pipeline would hold 2^64 bytes or more"));
  pipeline.workers = 0;  // 2^63 + 2^62 fits
  EXPECT_EQ(estimate_batch(pipeline).total_bytes, (1ull << 63) + (1ull << 62));
}

TEST(InputMemoryTable, GridOfResolutionsAndPowerOfTwoBatches) {
  const InputMemoryTable table = input_memory_table(DType::float32);
  EXPECT_THAT(table.resolutions, ElementsAre(32u, 64u, 128u, 224u, 256u, 512u, 1024u));
  EXPECT_THAT(table.batches, ElementsAre(32u, 64u, 128u, 256u, 512u, 1024u, 2048u, 4096u, 8192u, 16384u, 32768u,
                                         65536u));
  ASSERT_EQ(table.bytes.size(), table.resolutions.size());
  for (const auto& row : table.bytes) EXPECT_EQ(row.size(), table.batches.size());
  EXPECT_EQ(table.channels, 3u);
  EXPECT_EQ(table.bytes[3][2], kImageNetBatch);       // 224x224, batch 128
  EXPECT_EQ(table.bytes[0][0], 32u * 32 * 3 * 32 * 4);  // the smallest cell
}

TEST(InputMemoryTable, DTypeAndChannelsScaleEveryCell) {
  const InputMemoryTable int64_table = input_memory_table(DType::int64);
  EXPECT_EQ(int64_table.bytes[6][11], 1024ull * 1024 * 3 * 65536 * 8);  // 1.5 TiB
  const InputMemoryTable gray = input_memory_table(DType::uint8, 1);
  EXPECT_EQ(gray.bytes[0][0], 32u * 32 * 32);
  EXPECT_EQ(gray.dtype, DType::uint8);
}

TEST(InputMemoryTable, BadChannelsAreRejected) {
  EXPECT_THROW(input_memory_table(DType::float32, 0), InvalidArgument);
  // 1024 x 1024 x 2^40 channels x 65536 x 4 bytes is 2^78 bytes.
  try {
    input_memory_table(DType::float32, 1ull << 40);
    ADD_FAILURE() << "2^40 channels were accepted";
  } catch (const InvalidArgument& error) {
    EXPECT_THAT(error.what(), HasSubstr("1099511627776 channels"));
  }
}

}  // namespace
}  // namespace plimsoll
