// FashionCnn and its two stages (model.hpp). C++17: libtorch's headers.
#include "train/model.hpp"

#include <torch/nn/functional/pooling.h>
#include <torch/nn/options/conv.h>

namespace plimsoll::train {
namespace {
constexpr std::int64_t kSide = 28;  // Fashion-MNIST images are 28x28
constexpr std::int64_t kWidth1 = 16, kWidth2 = 32, kHidden = 128;
constexpr std::int64_t kFeatures = kWidth2 * (kSide / 4) * (kSide / 4);
}  // namespace

// The layers are registered, and so initialized from libtorch's generator, in the order conv1, conv2, norm1, norm2,
// hidden, out: the order of the single-module network this replaced, whose seeds' results docs/train.md reports.
FashionFeaturesImpl::FashionFeaturesImpl(std::int64_t channels)
    : conv1_(register_module("conv1", ::torch::nn::Conv2d(
                                          ::torch::nn::Conv2dOptions(channels, kWidth1, 3).padding(1).bias(false)))),
      conv2_(register_module("conv2", ::torch::nn::Conv2d(
                                          ::torch::nn::Conv2dOptions(kWidth1, kWidth2, 3).padding(1).bias(false)))),
      norm1_(register_module("norm1", ::torch::nn::BatchNorm2d(kWidth1))),
      norm2_(register_module("norm2", ::torch::nn::BatchNorm2d(kWidth2))) {}

::torch::Tensor FashionFeaturesImpl::forward(const ::torch::Tensor& images) {
  namespace F = ::torch::nn::functional;
  ::torch::Tensor x = F::max_pool2d(norm1_(conv1_(images)).relu_(), F::MaxPool2dFuncOptions(2));
  x = F::max_pool2d(norm2_(conv2_(x)).relu_(), F::MaxPool2dFuncOptions(2));
  return x.flatten(1);
}

FashionClassifierImpl::FashionClassifierImpl(std::int64_t classes)
    : hidden_(register_module("hidden", ::torch::nn::Linear(kFeatures, kHidden))),
      out_(register_module("out", ::torch::nn::Linear(kHidden, classes))) {}

::torch::Tensor FashionClassifierImpl::forward(const ::torch::Tensor& features) {
  return out_(hidden_(features).relu_());
}

FashionCnnImpl::FashionCnnImpl(std::int64_t channels, std::int64_t classes)
    : features_(register_module("features", FashionFeatures(channels))),
      classifier_(register_module("classifier", FashionClassifier(classes))) {}

::torch::Tensor FashionCnnImpl::forward(const ::torch::Tensor& images) { return classifier_(features_(images)); }

}  // namespace plimsoll::train
