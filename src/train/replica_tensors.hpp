#pragma once
// The tensors of a Replica that data parallelism keeps equal across copies. libtorch header: include only from the
// C++17 files of this folder (replica.cpp, process_group.cpp).
#include <vector>

#include <ATen/core/Tensor.h>

namespace plimsoll::train {

class Replica;

struct ReplicaTensors {
  /// What is averaged after each backward pass: every parameter's gradient, then batch norm's running mean and
  /// variance (the batch counter is equal on every copy already).
  static std::vector<at::Tensor> averaged(Replica& replica);
  /// What must stay equal on every copy: the parameters and the floating-point buffers.
  static std::vector<at::Tensor> state(const Replica& replica);
};

}  // namespace plimsoll::train
