#pragma once
// What every way of training the model (Replica, StagedReplica) does the same around libtorch: turn libtorch's
// out-of-memory error back into plimsoll's report, and score a batch. libtorch header: C++17 files only.
#include <cstddef>
#include <cstdint>

#include <ATen/core/Tensor.h>

#include "plimsoll/torch_error.hpp"
#include "train/replica.hpp"

namespace plimsoll::train {

// libtorch reports plimsoll's out-of-memory error as plimsoll::torch::HostOutOfMemoryError (a c10::Error) with
// plimsoll's report as its message (cpu_allocator.cpp); the job wants the report alone, as plimsoll's own error type.
template <class F>
auto translating_oom(F&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const plimsoll::torch::HostOutOfMemoryError& oom) {
    throw TrainingOutOfMemory(oom.msg());
  }
}

/// The batch's summed loss (`loss` is the mean) and how many of its samples the logits got right.
inline StepResult score(const at::Tensor& logits, const at::Tensor& labels, const at::Tensor& loss) {
  StepResult result;
  result.samples = static_cast<std::size_t>(labels.size(0));
  result.loss_sum = loss.item<double>() * static_cast<double>(result.samples);
  result.correct = static_cast<std::size_t>(logits.argmax(1).eq(labels).sum().item<std::int64_t>());
  return result;
}

}  // namespace plimsoll::train
