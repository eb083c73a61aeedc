#pragma once
// The network `plimsoll train` trains: a small convolutional classifier for 28x28 grey images (Fashion-MNIST).
// libtorch header: include only from C++17 files of this folder.
//
// It is two stages, so that `--model-parallel 2` can put each on its own device: the features (the convolutions)
// and the classifier (the linear layers). FashionCnn is the two in sequence, on one device.
#include <cstdint>

#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

namespace plimsoll::train {

// What TORCH_MODULE(Name) declares, spelled out: the macro names torch::nn unqualified, which inside plimsoll::
// finds plimsoll::torch.
#define PLIMSOLL_TRAIN_MODULE(Name)                                         \
  class Name : public ::torch::nn::ModuleHolder<Name##Impl> {               \
   public:                                                                  \
    using ::torch::nn::ModuleHolder<Name##Impl>::ModuleHolder;              \
  }

/// The first stage: two conv-batchnorm-relu-pool blocks (28 -> 14 -> 7, 16 and 32 channels), flattened to
/// 32 x 7 x 7 = 1,568 features per image. 4,848 parameters: little weight, most of the activations.
class FashionFeaturesImpl : public ::torch::nn::Module {
 public:
  explicit FashionFeaturesImpl(std::int64_t channels);
  ::torch::Tensor forward(const ::torch::Tensor& images);

 private:
  ::torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr};
  ::torch::nn::BatchNorm2d norm1_{nullptr}, norm2_{nullptr};
};
PLIMSOLL_TRAIN_MODULE(FashionFeatures);

/// The second stage: a hidden layer of 128 and the logits. 202,122 parameters: most of the weight.
class FashionClassifierImpl : public ::torch::nn::Module {
 public:
  explicit FashionClassifierImpl(std::int64_t classes);
  ::torch::Tensor forward(const ::torch::Tensor& features);

 private:
  ::torch::nn::Linear hidden_{nullptr}, out_{nullptr};
};
PLIMSOLL_TRAIN_MODULE(FashionClassifier);

// The two stages on one device: 207k parameters, 88% test accuracy after two epochs in under a minute on one core.
// Twice the channels cost twice the time for the same accuracy after one epoch (86.4% against 86.3%).
// No dropout: replicas of a data-parallel run must stay identical, and dropout draws from libtorch's global RNG
// in whichever order the replica threads run.
// Built after the same torch::manual_seed, FashionCnn and the two stages built one after the other (features
// first) draw the same initial weights: the stages make their layers in the order FashionCnn always did.
class FashionCnnImpl : public ::torch::nn::Module {
 public:
  FashionCnnImpl(std::int64_t channels, std::int64_t classes);
  ::torch::Tensor forward(const ::torch::Tensor& images);

 private:
  FashionFeatures features_{nullptr};
  FashionClassifier classifier_{nullptr};
};
PLIMSOLL_TRAIN_MODULE(FashionCnn);

#undef PLIMSOLL_TRAIN_MODULE

}  // namespace plimsoll::train
