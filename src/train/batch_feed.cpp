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
  // The copies are made here rather than through images() and labels(), so that the leak watch names this function
  // as the call site of the leak demo's batches (docs/train.md).
  at::Tensor images = images_in_place(batch).clone();
  at::Tensor labels = labels_in_place(batch).clone();
  if (keep_every_batch_) handed_out_.push_back(images);
  return {std::move(images), std::move(labels)};
}

at::Tensor BatchFeed::images(const BatchView& batch) {
  plimsoll::torch::TagScope tagged(plimsoll::torch::tags::batches);
  at::Tensor images = images_in_place(batch).clone();
  if (keep_every_batch_) handed_out_.push_back(images);
  return images;
}

at::Tensor BatchFeed::labels(const BatchView& batch) {
  plimsoll::torch::TagScope tagged(plimsoll::torch::tags::batches);
  return labels_in_place(batch).clone();
}

// Views of the caller's buffer, copied by the callers: a copy rather than a view, as a framework's input path makes
// when batches come from a loader, so the pipeline gets its buffer back at once and the copy is what the "batches"
// tag counts. from_blob takes void*; clone() only reads through it.
at::Tensor BatchFeed::images_in_place(const BatchView& batch) {
  return ::torch::from_blob(const_cast<float*>(batch.images),
                            {static_cast<std::int64_t>(batch.samples), kChannels, kSide, kSide}, ::torch::kFloat32);
}

at::Tensor BatchFeed::labels_in_place(const BatchView& batch) {
  return ::torch::from_blob(const_cast<std::int64_t*>(batch.labels), {static_cast<std::int64_t>(batch.samples)},
                            ::torch::kInt64);
}

}  // namespace plimsoll::train
