// BatchFeed (batch_feed.hpp). C++17: libtorch.
#include "train/batch_feed.hpp"

#include <torch/torch.h>

#include "plimsoll/torch.hpp"

namespace plimsoll::train {
namespace {
constexpr std::int64_t kChannels = 1, kSide = 28;
}

std::pair<at::Tensor, at::Tensor> BatchFeed::tensors(const BatchView& batch) {
  plimsoll::torch::TagScope tagged(plimsoll::torch::tags::batches);
  const auto samples = static_cast<std::int64_t>(batch.samples);
  // A copy rather than a view of the caller's buffer, as a framework's input path makes when batches come from a
  // loader: the pipeline gets its buffer back at once, and the copy is what the "batches" tag counts. from_blob
  // takes void*; clone() only reads through it.
  at::Tensor images =
      ::torch::from_blob(const_cast<float*>(batch.images), {samples, kChannels, kSide, kSide}, ::torch::kFloat32)
          .clone();
  at::Tensor labels = ::torch::from_blob(const_cast<std::int64_t*>(batch.labels), {samples}, ::torch::kInt64).clone();
  if (keep_every_batch_) handed_out_.push_back(images);
  return {std::move(images), std::move(labels)};
}

}  // namespace plimsoll::train
