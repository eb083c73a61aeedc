// Replica (replica.hpp): the model, its optimizer and the per-tag routing of their tensors. C++17: libtorch.
#include "train/replica.hpp"

#include <exception>
#include <utility>

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/adam.h>
#include <torch/utils.h>

#include "plimsoll/torch.hpp"
#include "train/batch_feed.hpp"
#include "train/model.hpp"
#include "train/replica_tensors.hpp"
#include "train/torch_step.hpp"

namespace plimsoll::train {
namespace {

namespace tags = plimsoll::torch::tags;
using plimsoll::torch::DeviceScope;
using plimsoll::torch::TagScope;

constexpr std::int64_t kChannels = 1;

}  // namespace

StepResult& operator+=(StepResult& total, const StepResult& part) {
  total.loss_sum += part.loss_sum;
  total.correct += part.correct;
  total.samples += part.samples;
  return total;
}

struct Replica::Impl {
  Allocator& device;
  FashionCnn model{nullptr};
  std::unique_ptr<::torch::optim::Adam> optimizer;
  BatchFeed feed;       // training batches: the leak demo plants its bug here
  BatchFeed eval_feed;  // test batches, never kept

  Impl(Allocator& on, const ReplicaOptions& options) : device(on) {
    DeviceScope scope(device);
    TagScope tagged(tags::weights);
    ::torch::manual_seed(options.seed);
    model = FashionCnn(kChannels, options.classes);
    optimizer = std::make_unique<::torch::optim::Adam>(model->parameters(),
                                                       ::torch::optim::AdamOptions(options.learning_rate));
  }
};

Replica::Replica(Allocator& device, const ReplicaOptions& options)
    : impl_(translating_oom([&] { return std::make_unique<Impl>(device, options); })) {}

Replica::~Replica() {
  DeviceScope scope(impl_->device);  // frees go to their own device anyway; this only keeps any temporaries there
  impl_.reset();
}

StepResult Replica::forward_backward(const BatchView& batch) {
  return translating_oom([&] {
    DeviceScope scope(impl_->device);
    impl_->model->train();
    impl_->optimizer->zero_grad();
    auto [images, labels] = impl_->feed.tensors(batch);
    ::torch::Tensor logits, loss;
    {
      TagScope tagged(tags::activations);
      logits = impl_->model->forward(images);
      loss = ::torch::nn::functional::cross_entropy(logits, labels);
    }
    {
      TagScope tagged(tags::gradients);
      loss.backward();
    }
    TagScope tagged(tags::activations);
    return score(logits.detach(), labels, loss.detach());
  });
}

void Replica::optimizer_step() {
  translating_oom([&] {
    DeviceScope scope(impl_->device);
    TagScope tagged(tags::optimizer_state);
    impl_->optimizer->step();
  });
}

StepResult Replica::evaluate(const BatchView& batch) {
  return translating_oom([&] {
    DeviceScope scope(impl_->device);
    ::torch::NoGradGuard no_grad;
    impl_->model->eval();
    TagScope tagged(tags::activations);
    auto [images, labels] = impl_->eval_feed.tensors(batch);
    ::torch::Tensor logits = impl_->model->forward(images);
    return score(logits, labels, ::torch::nn::functional::cross_entropy(logits, labels));
  });
}

void Replica::keep_every_batch(bool keep) { impl_->feed.keep_every_batch(keep); }

Allocator& Replica::device() const noexcept { return impl_->device; }

std::uint64_t Replica::parameters() const {
  std::uint64_t count = 0;
  for (const ::torch::Tensor& parameter : impl_->model->parameters()) count += static_cast<std::uint64_t>(parameter.numel());
  return count;
}

std::vector<at::Tensor> ReplicaTensors::averaged(Replica& replica) {
  std::vector<at::Tensor> tensors;
  for (::torch::Tensor& parameter : replica.impl_->model->parameters()) tensors.push_back(parameter.mutable_grad());
  for (const ::torch::Tensor& buffer : replica.impl_->model->buffers()) {
    if (buffer.is_floating_point()) tensors.push_back(buffer);
  }
  return tensors;
}

std::vector<at::Tensor> ReplicaTensors::state(const Replica& replica) {
  std::vector<at::Tensor> tensors = replica.impl_->model->parameters();
  for (const ::torch::Tensor& buffer : replica.impl_->model->buffers()) {
    if (buffer.is_floating_point()) tensors.push_back(buffer);
  }
  return tensors;
}

void average_gradients(const std::vector<Replica*>& replicas) {
  if (replicas.size() < 2) return;
  std::vector<std::vector<at::Tensor>> tensors;
  for (Replica* replica : replicas) tensors.push_back(ReplicaTensors::averaged(*replica));
  // Nothing should be allocated here; what libtorch does allocate (a wrapped scalar) counts as replica 0's gradients.
  DeviceScope scope(replicas[0]->impl_->device);
  TagScope tagged(tags::gradients);
  ::torch::NoGradGuard no_grad;
  const double share = 1.0 / static_cast<double>(replicas.size());
  // Gradients, then batch norm's running statistics: each replica saw its own share of the batch, and averaging
  // them every step keeps the copies identical, so any replica can be evaluated.
  for (std::size_t t = 0; t < tensors[0].size(); ++t) {
    at::Tensor sum = tensors[0][t];
    // In place, on replica 0's tensor, then copied into the others: no new tensor on any device.
    for (std::size_t r = 1; r < replicas.size(); ++r) sum.add_(tensors[r][t]);
    sum.mul_(share);
    for (std::size_t r = 1; r < replicas.size(); ++r) tensors[r][t].copy_(sum);
  }
}

void set_compute_threads(int threads) { at::set_num_threads(threads); }

}  // namespace plimsoll::train
