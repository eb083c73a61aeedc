// BatchFeed (batch_feed.hpp). C++17: libtorch.
#include "train/batch_feed.hpp"

#include <torch/torch.h>

#include "plimsoll/torch.hpp"

namespace plimsoll::train {
namespace {
constexpr std::int64_t kChannels = 1, kSide = 28;
}

std::pair<at::Tensor, at::Tensor> BatchFeed::tensors(const BatchView& batch) {
  at::Tensor images_on_device = images(batch);
  return {std::move(images_on_device), labels(batch)};
}

at::Tensor BatchFeed::images(const BatchView& batch) {
  plimsoll::torch::TagScope tagged(plimsoll::torch::tags::batches);
  // A copy rather than a view of the caller's buffer, as a framework's input path makes when batches come from a
  // loader: the pipeline gets its buffer back at once, and the copy is what the "batches" tag counts. from_blob
  // takes void*; clone() only reads through it.
  at::Tensor copy = ::torch::from_blob(const_cast<float*>(batch.images),
                                       {static_cast<std::int64_t>(batch.samples), kChannels, kSide, kSide},
                                       ::torch::kFloat32)
                        .clone();
  if (keep_every_batch_) handed_out_.push_back(copy);
  return copy;
}

at::Tensor BatchFeed::labels(const BatchView& batch) {
  plimsoll::torch::TagScope tagged(plimsoll::torch::tags::batches);
  return ::torch::from_blob(const_cast<std::int64_t*>(batch.labels), {static_cast<std::int64_t>(batch.samples)},
                            ::torch::kInt64)
      .clone();
}

}  // namespace plimsoll::train
