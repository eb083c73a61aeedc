#pragma once
// ResNet-18 in libtorch's C++ modules, for plimsoll_resnet18_step_bench: BasicBlock x [2, 2, 2, 2] at 64, 128, 256,
// 512 channels, batch norm after every convolution, a 1x1 convolution + batch norm on the shortcut where the shape
// changes, the 7x7/2 stem and 3x3/2 max pool, global average pool and a linear classifier (1000 classes by
// default, ImageNet's). This is torchvision's layout (resnet18() with its default arguments), written here for the
// C++ API. Includes libtorch: compile as C++17 (libtorch 1.13's headers fail as C++20 under Clang 14), and keep it
// outside namespace plimsoll, where `torch::` would name plimsoll::torch.
#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace resnet {

inline torch::nn::Conv2d conv(std::int64_t in, std::int64_t out, std::int64_t kernel, std::int64_t stride) {
  // No bias: the batch norm that follows every convolution has its own shift.
  return torch::nn::Conv2d(
      torch::nn::Conv2dOptions(in, out, kernel).stride(stride).padding(kernel / 2).bias(false));
}

/// Two 3x3 convolutions with a residual connection; the first one strides when the stage halves the resolution.
struct BasicBlockImpl : torch::nn::Module {
  BasicBlockImpl(std::int64_t in, std::int64_t out, std::int64_t stride)
      : conv1(register_module("conv1", conv(in, out, 3, stride))),
        bn1(register_module("bn1", torch::nn::BatchNorm2d(out))),
        conv2(register_module("conv2", conv(out, out, 3, 1))),
        bn2(register_module("bn2", torch::nn::BatchNorm2d(out))) {
    if (stride != 1 || in != out) {
      downsample = register_module("downsample", torch::nn::Sequential(conv(in, out, 1, stride),
                                                                       torch::nn::BatchNorm2d(out)));
    }
  }

  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor y = torch::relu(bn1(conv1(x)));
    y = bn2(conv2(y));
    return torch::relu(y + (downsample ? downsample->forward(x) : x));
  }

  torch::nn::Conv2d conv1;
  torch::nn::BatchNorm2d bn1;
  torch::nn::Conv2d conv2;
  torch::nn::BatchNorm2d bn2;
  torch::nn::Sequential downsample{nullptr};
};
TORCH_MODULE(BasicBlock);

struct ResNet18Impl : torch::nn::Module {
  explicit ResNet18Impl(std::int64_t classes = 1000)
      : stem(register_module("conv1", conv(3, 64, 7, 2))),
        stem_bn(register_module("bn1", torch::nn::BatchNorm2d(64))) {
    std::int64_t in = 64;
    const std::int64_t widths[] = {64, 128, 256, 512};
    for (std::size_t stage = 0; stage < 4; ++stage) {
      const std::int64_t out = widths[stage];
      torch::nn::Sequential blocks(BasicBlock(in, out, stage == 0 ? 1 : 2), BasicBlock(out, out, 1));
      layers.push_back(register_module("layer" + std::to_string(stage + 1), blocks));
      in = out;
    }
    fc = register_module("fc", torch::nn::Linear(512, classes));  // registered last, as torchvision orders them
    // torchvision's initialization: He-normal (fan out) convolutions, batch norm scale 1 and shift 0; the linear
    // layer keeps its default.
    for (auto& module : modules(/*include_self=*/false)) {
      if (auto* c = module->as<torch::nn::Conv2d>()) {
        torch::nn::init::kaiming_normal_(c->weight, 0.0, torch::kFanOut, torch::kReLU);
      } else if (auto* b = module->as<torch::nn::BatchNorm2d>()) {
        torch::nn::init::ones_(b->weight);
        torch::nn::init::zeros_(b->bias);
      }
    }
  }

  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(stem_bn(stem(x))), /*kernel_size=*/3, /*stride=*/2, /*padding=*/1);
    for (auto& layer : layers) x = layer->forward(x);
    x = torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1);
    return fc(x);
  }

  torch::nn::Conv2d stem;
  torch::nn::BatchNorm2d stem_bn;
  std::vector<torch::nn::Sequential> layers;
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(ResNet18);

}  // namespace resnet
