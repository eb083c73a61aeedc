#pragma once
// Random Fashion-MNIST-shaped batches for the tests of the main job's replicas (28x28 images, labels 0-9), the same
// for a seed on every run. C++17 (libtorch's tests).
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "train/replica.hpp"

namespace plimsoll::torch_test {

inline constexpr std::size_t kPixels = 28 * 28;

struct Data {
  std::vector<float> images;
  std::vector<std::int64_t> labels;
  train::BatchView view(std::size_t begin, std::size_t end) const {
    return {images.data() + begin * kPixels, labels.data() + begin, end - begin};
  }
};

inline Data random_samples(std::size_t samples, unsigned seed) {
  std::mt19937 generator(seed);
  std::normal_distribution<float> pixel(0.0f, 1.0f);
  std::uniform_int_distribution<std::int64_t> label(0, 9);
  Data data;
  for (std::size_t i = 0; i < samples * kPixels; ++i) data.images.push_back(pixel(generator));
  for (std::size_t i = 0; i < samples; ++i) data.labels.push_back(label(generator));
  return data;
}

}  // namespace plimsoll::torch_test
