// Fashion-MNIST through plimsoll::Pipeline: read, augment (random flip and shift, seeded per sample) and normalize
// into batches of float images and int64 labels, under a byte budget of six batches, with four workers.
//
//   plimsoll_fashion_mnist_pipeline [DIR]     (DIR defaults to the Debian package's folder)
//
// Exits 77 (a skip, for ctest) when the dataset is not installed.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>

#include "plimsoll/datasets.hpp"
#include "plimsoll/pipeline.hpp"
#include "plimsoll/size.hpp"

int main(int argc, char** argv) {
  using namespace plimsoll;
  const std::filesystem::path dir = argc > 1 ? std::filesystem::path(argv[1]) : default_fashion_mnist_dir();
  if (!std::filesystem::exists(dir)) {
    std::printf("skipped: %s does not exist; apt-get install dataset-fashion-mnist\n", dir.c_str());
    return 77;
  }
  try {
    const ImageDataset train = load_fashion_mnist(dir, Split::train);
    const ImageShape shape = train.shape();
    const std::size_t pixels = shape.bytes();
    constexpr std::size_t kBatch = 256;

    PipelineOptions options;
    options.dataset_size = train.size();
    options.batch_size = kBatch;
    options.sample_fields = {pixels * sizeof(float), sizeof(std::int64_t)};
    options.workers = 4;
    options.scratch_bytes = pixels;  // the augmented uint8 image, before it is normalized
    options.max_bytes = 6 * batch_buffer_bytes(options) + options.workers * options.scratch_bytes;  // 6 batches
    options.shuffle = true;
    options.epochs = 2;
    options.seed = 2026;

    std::vector<SampleStage> stages{
        [&](Sample& sample) {  // read and augment
          augment_sample(train.image(sample.index), {reinterpret_cast<std::uint8_t*>(sample.scratch.data()), pixels},
                         shape, sample.seed);
          const std::int64_t label = train.label(sample.index);
          std::memcpy(sample.fields[1].data(), &label, sizeof label);
        },
        [&](Sample& sample) {  // normalize with Fashion-MNIST's mean and standard deviation
          normalize({reinterpret_cast<const std::uint8_t*>(sample.scratch.data()), pixels},
                    {reinterpret_cast<float*>(sample.fields[0].data()), pixels}, 0.2860f, 0.3530f);
        }};
    Pipeline pipeline(options, stages);

    const auto start = std::chrono::steady_clock::now();
    std::uint64_t samples = 0;
    double checksum = 0;
    while (auto batch = pipeline.next()) {
      const auto images = batch->field_as<const float>(0);
      const auto labels = batch->field_as<const std::int64_t>(1);
      checksum += static_cast<double>(images[0]) + static_cast<double>(labels[batch->size() - 1]);
      samples += batch->size();
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const PipelineMetrics m = pipeline.metrics();
    std::printf("%llu samples in %.2f s (%.0f samples/s), checksum %.3f\n", static_cast<unsigned long long>(samples),
                seconds, static_cast<double>(samples) / seconds, checksum);
    std::printf("peak held %s of a %s budget, %llu buffers allocated, consumer waited %.1f%% of the run\n",
                format_size(m.peak_bytes_held).c_str(), format_size(m.byte_budget).c_str(),
                static_cast<unsigned long long>(m.buffers_allocated),
                100.0 * std::chrono::duration<double>(m.consumer_wait).count() / seconds);
    return m.peak_bytes_held <= m.byte_budget ? 0 : 1;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "error: %s\n", error.what());
    return 1;
  }
}
