// StagedReplica (staged_replica.hpp): the two stages of FashionCnn on two devices, pipelined over micro-batches.
// C++17: libtorch.
#include "train/staged_replica.hpp"

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>

#include <torch/nn/functional/loss.h>
#include <torch/optim/adam.h>
#include <torch/utils.h>

#include "plimsoll/error.hpp"
#include "plimsoll/torch.hpp"
#include "train/batch_feed.hpp"
#include "train/model.hpp"
#include "train/pipeline_schedule.hpp"
#include "train/torch_step.hpp"

namespace plimsoll::train {
namespace {

namespace tags = plimsoll::torch::tags;
using plimsoll::torch::DeviceScope;
using plimsoll::torch::TagScope;

constexpr std::int64_t kChannels = 1;
constexpr std::size_t kPixels = 28 * 28;
// Micro-batches waiting between the stages: one being computed by stage 1 and one ready for it is enough to keep
// both busy; more would only hold more of stage 1's input copies at once.
constexpr std::size_t kInFlight = 2;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Micro-batch i of `count`: contiguous shares that differ by at most one sample.
BatchView micro_batch(const BatchView& batch, std::size_t i, std::size_t count) {
  const std::size_t begin = batch.samples * i / count, end = batch.samples * (i + 1) / count;
  return {batch.images + begin * kPixels, batch.labels + begin, end - begin};
}

}  // namespace

struct StagedReplica::Impl {
  Allocator& first;   // stage 0: the first conv block
  Allocator& second;  // stage 1: the second conv block and the linear layers
  std::size_t micro_batches;
  int compute_threads;
  FashionFirstStage first_stage{nullptr};
  FashionSecondStage second_stage{nullptr};
  std::unique_ptr<::torch::optim::Adam> first_optimizer, second_optimizer;
  BatchFeed feed;       // images only from stage 0's thread, labels from stage 1's: no state is shared
  BatchFeed eval_feed;  // test batches, never kept
  double first_busy = 0, second_busy = 0;

  Impl(Allocator& first_device, Allocator& second_device, const ReplicaOptions& options, std::size_t micro,
       int threads)
      : first(first_device), second(second_device), micro_batches(micro), compute_threads(threads) {
    // One seed, then the stages in FashionCnn's order: the same initial weights as a Replica's.
    ::torch::manual_seed(options.seed);
    const auto adam = ::torch::optim::AdamOptions(options.learning_rate);
    {
      DeviceScope scope(first);
      TagScope tagged(tags::weights);
      first_stage = FashionFirstStage(kChannels);
      first_optimizer = std::make_unique<::torch::optim::Adam>(first_stage->parameters(), adam);
    }
    DeviceScope scope(second);
    TagScope tagged(tags::weights);
    second_stage = FashionSecondStage(options.classes);
    second_optimizer = std::make_unique<::torch::optim::Adam>(second_stage->parameters(), adam);
  }
};

StagedReplica::StagedReplica(const std::vector<Allocator*>& stage_devices, const ReplicaOptions& options,
                             std::size_t micro_batches, int compute_threads) {
  if (stage_devices.size() != kStages || stage_devices[0] == nullptr || stage_devices[1] == nullptr) {
    throw InvalidArgument("the model splits into 2 stages: give 2 devices, not " +
                          std::to_string(stage_devices.size()));
  }
  if (micro_batches == 0) throw InvalidArgument("--micro-batches must be at least 1");
  impl_ = translating_oom([&] {
    return std::make_unique<Impl>(*stage_devices[0], *stage_devices[1], options, micro_batches, compute_threads);
  });
}

StagedReplica::~StagedReplica() = default;  // every tensor is freed into the device that made it

StepResult StagedReplica::train_step(const BatchView& batch) {
  Impl& m = *impl_;
  const std::size_t count = std::min(m.micro_batches, batch.samples);
  const double whole = static_cast<double>(batch.samples);
  return translating_oom([&] {
    m.first_stage->train();
    m.second_stage->train();
    {
      DeviceScope scope(m.first);
      m.first_optimizer->zero_grad();
    }
    {
      DeviceScope scope(m.second);
      m.second_optimizer->zero_grad();
    }
    // Stage 0's outputs, graph attached, until their gradients come back.
    std::vector<at::Tensor> outputs(count);
    StepResult result;  // written by stage 1's thread only, read after it has been joined
    run_two_stage_pipeline(
        count, kInFlight,
        [&](std::size_t i) {
          return translating_oom([&] {
            const auto started = std::chrono::steady_clock::now();
            DeviceScope scope(m.first);
            at::Tensor images = m.feed.images(micro_batch(batch, i, count));
            TagScope tagged(tags::activations);
            outputs[i] = m.first_stage->forward(images);
            m.first_busy += seconds_since(started);
            // Stage 1 copies it onto its own device; the graph stays with stage 0's tensor.
            return outputs[i].detach();
          });
        },
        [&](std::size_t i, at::Tensor features) {
          return translating_oom([&] {
            const auto started = std::chrono::steady_clock::now();
            DeviceScope scope(m.second);
            const BatchView part = micro_batch(batch, i, count);
            at::Tensor labels = m.feed.labels(part);
            at::Tensor input, logits, loss, scaled;
            {
              TagScope tagged(tags::activations);
              input = features.clone().requires_grad_(true);
              features.reset();  // stage 0's tensor: its copy here is what this stage computes on
              logits = m.second_stage->forward(input);
              loss = ::torch::nn::functional::cross_entropy(logits, labels);
              // The micro-batch's mean loss weighted by its share of the batch: the gradients summed over the
              // micro-batches are those of the whole batch's mean loss.
              scaled = loss * (static_cast<double>(part.samples) / whole);
            }
            {
              TagScope tagged(tags::gradients);
              scaled.backward();
            }
            {
              TagScope tagged(tags::activations);
              result += score(logits.detach(), labels, loss.detach());
            }
            at::Tensor gradient = input.grad();
            m.second_busy += seconds_since(started);
            return gradient;
          });
        },
        [&](std::size_t i, at::Tensor gradient) {
          translating_oom([&] {
            const auto started = std::chrono::steady_clock::now();
            DeviceScope scope(m.first);
            TagScope tagged(tags::gradients);
            at::Tensor here = gradient.clone();
            gradient.reset();
            outputs[i].backward(here);
            outputs[i].reset();  // frees the micro-batch's graph and activations at once
            m.first_busy += seconds_since(started);
          });
        },
        [&] { set_compute_threads(m.compute_threads); });
    {
      DeviceScope scope(m.first);
      TagScope tagged(tags::optimizer_state);
      m.first_optimizer->step();
    }
    DeviceScope scope(m.second);
    TagScope tagged(tags::optimizer_state);
    m.second_optimizer->step();
    return result;
  });
}

StepResult StagedReplica::evaluate(const BatchView& batch) {
  Impl& m = *impl_;
  return translating_oom([&] {
    ::torch::NoGradGuard no_grad;
    m.first_stage->eval();
    m.second_stage->eval();
    at::Tensor features;
    {
      DeviceScope scope(m.first);
      TagScope tagged(tags::activations);
      at::Tensor images = m.eval_feed.images(batch);
      features = m.first_stage->forward(images);
    }
    DeviceScope scope(m.second);
    TagScope tagged(tags::activations);
    at::Tensor labels = m.eval_feed.labels(batch);
    at::Tensor input = features.clone();
    features.reset();
    at::Tensor logits = m.second_stage->forward(input);
    return score(logits, labels, ::torch::nn::functional::cross_entropy(logits, labels));
  });
}

void StagedReplica::keep_every_batch(bool keep) { impl_->feed.keep_every_batch(keep); }

std::uint64_t StagedReplica::parameters() const {
  std::uint64_t count = 0;
  for (const at::Tensor& p : impl_->first_stage->parameters()) count += static_cast<std::uint64_t>(p.numel());
  for (const at::Tensor& p : impl_->second_stage->parameters()) count += static_cast<std::uint64_t>(p.numel());
  return count;
}

std::size_t StagedReplica::micro_batches() const noexcept { return impl_->micro_batches; }

std::vector<double> StagedReplica::stage_busy_seconds() const { return {impl_->first_busy, impl_->second_busy}; }

}  // namespace plimsoll::train
