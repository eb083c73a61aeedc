// libtorch's data loader for plimsoll_libtorch_loader_bench, compiled as C++17 (see libtorch_loader.hpp).
#include "libtorch_loader.hpp"

#include <atomic>
#include <utility>

#include <torch/torch.h>

namespace plimsoll::bench::compare {
namespace {

/// A map-style libtorch dataset: get(i) builds one sample as its own pair of tensors, as a libtorch user writes
/// it; the loader's Stack transform collates them. The epoch comes from the training loop.
class SampleDataset : public torch::data::datasets::Dataset<SampleDataset> {
 public:
  SampleDataset(const TorchLoaderOptions& options, std::shared_ptr<const MakeSample> make_sample,
                std::shared_ptr<const std::atomic<std::uint64_t>> epoch)
      : size_(options.dataset_size),
        rows_(static_cast<std::int64_t>(options.rows)),
        cols_(static_cast<std::int64_t>(options.cols)),
        make_sample_(std::move(make_sample)),
        epoch_(std::move(epoch)) {}

  torch::data::Example<> get(std::size_t index) override {
    torch::Tensor image = torch::empty({1, rows_, cols_}, torch::kFloat32);
    const std::int64_t label =
        (*make_sample_)(epoch_->load(std::memory_order_relaxed), index, image.data_ptr<float>());
    return {std::move(image), torch::scalar_tensor(label, torch::kInt64)};
  }

  torch::optional<std::size_t> size() const override { return size_; }

 private:
  std::size_t size_;
  std::int64_t rows_;
  std::int64_t cols_;
  std::shared_ptr<const MakeSample> make_sample_;
  std::shared_ptr<const std::atomic<std::uint64_t>> epoch_;
};

using Dataset = torch::data::datasets::MapDataset<SampleDataset, torch::data::transforms::Stack<>>;
using Loader = torch::data::StatelessDataLoader<Dataset, torch::data::samplers::RandomSampler>;

}  // namespace

struct TorchLoader::Impl {
  std::shared_ptr<std::atomic<std::uint64_t>> epoch = std::make_shared<std::atomic<std::uint64_t>>(0);
  std::unique_ptr<Loader> loader;
};

TorchLoader::TorchLoader(const TorchLoaderOptions& options, MakeSample make_sample) : impl_(std::make_unique<Impl>()) {
  if (options.threads > 0) torch::set_num_threads(options.threads);
  torch::manual_seed(options.seed);
  auto dataset = SampleDataset(options, std::make_shared<const MakeSample>(std::move(make_sample)), impl_->epoch)
                     .map(torch::data::transforms::Stack<>());
  impl_->loader = torch::data::make_data_loader<torch::data::samplers::RandomSampler>(
      std::move(dataset), torch::data::DataLoaderOptions()
                              .batch_size(options.batch_size)
                              .workers(options.workers)
                              .max_jobs(options.max_jobs));
}

TorchLoader::~TorchLoader() = default;

void TorchLoader::run_epoch(std::uint64_t epoch, const std::function<void(const TorchBatchView&)>& on_batch) {
  impl_->epoch->store(epoch, std::memory_order_relaxed);  // before begin(), which sends the epoch's first jobs
  bool first = true;
  auto it = impl_->loader->end();
  for (;;) {
    TorchBatchView view;
    view.asked = std::chrono::steady_clock::now();
    if (first) {
      it = impl_->loader->begin();
      first = false;
    } else {
      ++it;
    }
    if (it == impl_->loader->end()) break;
    const auto& batch = *it;
    view.got = std::chrono::steady_clock::now();
    view.pixels = batch.data.data_ptr<float>();
    view.labels = batch.target.data_ptr<std::int64_t>();
    view.samples = static_cast<std::size_t>(batch.data.size(0));
    on_batch(view);
  }
}

int TorchLoader::threads() const { return torch::get_num_threads(); }

std::string TorchLoader::version() { return TORCH_VERSION; }

}  // namespace plimsoll::bench::compare
