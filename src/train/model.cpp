// FashionCnn and its two stages (model.hpp). C++17: libtorch's headers.
#include "train/model.hpp"

#include <torch/nn/functional/pooling.h>
#include <torch/nn/options/conv.h>

namespace plimsoll::train {
namespace {
constexpr std::int64_t kSide = 28;  // Fashion-MNIST images are 28x28
constexpr std::int64_t kWidth1 = 16, kWidth2 = 32, kHidden = 128;
constexpr std::int64_t kFeatures = kWidth2 * (kSide / 4) * (kSide / 4);

namespace F = ::torch::nn::functional;

::torch::nn::Conv2d conv3x3(std::int64_t in, std::int64_t out) {
  return ::torch::nn::Conv2d(::torch::nn::Conv2dOptions(in, out, 3).padding(1).bias(false));
}
}  // namespace

FashionFirstStageImpl::FashionFirstStageImpl(std::int64_t channels)
    : conv1_(register_module("conv1", conv3x3(channels, kWidth1))),
      norm1_(register_module("norm1", ::torch::nn::BatchNorm2d(kWidth1))) {}

::torch::Tensor FashionFirstStageImpl::forward(const ::torch::Tensor& images) {
  return F::max_pool2d(norm1_(conv1_(images)).relu_(), F::MaxPool2dFuncOptions(2));
}

FashionSecondStageImpl::FashionSecondStageImpl(std::int64_t classes)
    : conv2_(register_module("conv2", conv3x3(kWidth1, kWidth2))),
      norm2_(register_module("norm2", ::torch::nn::BatchNorm2d(kWidth2))),
      hidden_(register_module("hidden", ::torch::nn::Linear(kFeatures, kHidden))),
      out_(register_module("out", ::torch::nn::Linear(kHidden, classes))) {}

::torch::Tensor FashionSecondStageImpl::forward(const ::torch::Tensor& features) {
  const ::torch::Tensor x = F::max_pool2d(norm2_(conv2_(features)).relu_(), F::MaxPool2dFuncOptions(2));
  return out_(hidden_(x.flatten(1)).relu_());
}

FashionCnnImpl::FashionCnnImpl(std::int64_t channels, std::int64_t classes)
    : first_(register_module("first", FashionFirstStage(channels))),
      second_(register_module("second", FashionSecondStage(classes))) {}

::torch::Tensor FashionCnnImpl::forward(const ::torch::Tensor& images) { return second_(first_(images)); }

}  // namespace plimsoll::train
