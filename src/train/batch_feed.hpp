#pragma once
// The replica's input: turns a batch in the caller's memory into tensors on the current device (tag "batches").
// It is also where `plimsoll train --leak-demo` plants its bug. libtorch header: C++17 files only.
#include <cstdint>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "train/replica.hpp"

namespace plimsoll::train {

class BatchFeed {
 public:
  /// The batch's images (N x 1 x 28 x 28 float) and labels (N int64), copied onto the current device.
  std::pair<at::Tensor, at::Tensor> tensors(const BatchView& batch);
  /// The two halves of tensors(), for a model split over devices: the first stage's device takes the images, the
  /// last stage's the labels.
  at::Tensor images(const BatchView& batch);
  at::Tensor labels(const BatchView& batch);

  /// The bug of the Keras report (a data generator that kept a reference to every batch it yielded): while on,
  /// every batch handed out stays referenced here, so memory grows by one batch of images per step and the leak
  /// watch names tensors() as the call site.
  void keep_every_batch(bool keep) { keep_every_batch_ = keep; }

 private:
  static at::Tensor images_in_place(const BatchView& batch);  // views of the caller's buffer, not copies
  static at::Tensor labels_in_place(const BatchView& batch);

  bool keep_every_batch_ = false;
  std::vector<at::Tensor> handed_out_;  // only with keep_every_batch_: the leak
};

}  // namespace plimsoll::train
