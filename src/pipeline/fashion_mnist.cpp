// Fashion-MNIST (Xiao, Rasul and Vollgraf, 2017) as the Debian package dataset-fashion-mnist installs it: four
// gzipped IDX files under the names of the original MNIST files, which load the same way.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>

#include <fmt/format.h>

#include "plimsoll/datasets.hpp"
#include "plimsoll/error.hpp"

namespace plimsoll {
namespace {

constexpr std::string_view kInstall =
    "install it (apt-get install dataset-fashion-mnist) or give the folder that holds its four files";
constexpr std::uint32_t kSide = 28;
constexpr std::uint8_t kClasses = 10;

// `name`.gz in `dir`, else `name` as it is once gunzipped.
std::filesystem::path find_file(const std::filesystem::path& dir, const std::string& name) {
  std::error_code error;
  for (const std::filesystem::path& candidate : {dir / (name + ".gz"), dir / name}) {
    if (std::filesystem::is_regular_file(candidate, error)) return candidate;
  }
  throw InvalidArgument(fmt::format("Fashion-MNIST is not in {}: it has no {}.gz (nor {}); {}", dir.string(), name,
                                    name, kInstall));
}

}  // namespace

std::filesystem::path default_fashion_mnist_dir() { return "/usr/share/datasets/fashion-mnist"; }

ImageDataset load_fashion_mnist(const std::filesystem::path& dir, Split split) {
  const std::string prefix = split == Split::train ? "train" : "t10k";
  const std::filesystem::path images = find_file(dir, prefix + "-images-idx3-ubyte");
  const std::filesystem::path labels = find_file(dir, prefix + "-labels-idx1-ubyte");
  ImageDataset dataset = load_idx_dataset(images, labels);
  // A model built for Fashion-MNIST takes 28 x 28 x 1 and 10 classes: other data must fail here, not in training.
  if (dataset.shape().rows != kSide || dataset.shape().cols != kSide || dataset.shape().channels != 1) {
    throw InvalidArgument(fmt::format("IDX file {} holds images of {}x{}x{}; Fashion-MNIST's are 28x28x1; give the "
                                      "Fashion-MNIST files, or load_idx_dataset for other images",
                                      images.string(), dataset.shape().rows, dataset.shape().cols,
                                      dataset.shape().channels));
  }
  for (std::size_t i = 0; i < dataset.size(); ++i) {
    if (dataset.label(i) >= kClasses) {
      throw InvalidArgument(fmt::format("IDX file {} gives image {} the label {}; Fashion-MNIST's are 0 to 9; give "
                                        "the Fashion-MNIST files, or load_idx_dataset for other labels",
                                        labels.string(), i, dataset.label(i)));
    }
  }
  return dataset;
}

}  // namespace plimsoll
