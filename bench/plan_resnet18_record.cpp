// plimsoll_plan_resnet18_record: records a few training steps of ResNet-18 (resnet18.hpp) under libtorch on the CPU,
// every tensor in plimsoll's cpu device, for `plimsoll plan`'s accuracy benchmark (bench/plan_accuracy.sh): the
// weights are made inside the recording, then each step (a fresh synthetic batch, zero_grad, forward, loss,
// backward, SGD with momentum) is bracketed by plimsoll::step(), tagged like `plimsoll train` tags its own.
//
//   plimsoll_plan_resnet18_record --batch 16 --steps 3 --record r16.plimsoll
//
// C++17 like every file that includes libtorch's headers; the recording is opened through plan_recording.hpp.
#include <cstdint>
#include <exception>
#include <iostream>
#include <optional>
#include <utility>
#include <string>

#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include "plan_recording.hpp"
#include "plimsoll/recording.hpp"
#include "plimsoll/torch.hpp"
#include "resnet18.hpp"

namespace {

namespace tags = plimsoll::torch::tags;

struct Options {
  std::int64_t batch = 16;
  std::int64_t image_size = 64;
  std::int64_t classes = 100;
  int steps = 3;
  std::string record;
};

void run(const Options& o) {
  plimsoll::torch::install("cpu");  // before the first tensor
  torch::set_num_threads(2);
  torch::manual_seed(1);
  plimsoll::bench::plan_recording::begin(
      o.record, "model resnet18 batch " + std::to_string(o.batch) + " input " + std::to_string(o.image_size) + "x" +
                    std::to_string(o.image_size) + "x3 classes " + std::to_string(o.classes) + " optimizer sgd");
  {
    std::optional<plimsoll::torch::TagScope> weights_tag(std::in_place, tags::weights);
    resnet::ResNet18 model(o.classes);
    model->train();
    torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
    weights_tag.reset();
    for (int step = 0; step < o.steps; ++step) {
      plimsoll::step();
      torch::Tensor images;
      torch::Tensor labels;
      {
        plimsoll::torch::TagScope batches("batches");
        images = torch::randn({o.batch, 3, o.image_size, o.image_size});
        labels = torch::randint(o.classes, {o.batch}, torch::kLong);
      }
      optimizer.zero_grad();
      torch::Tensor loss;
      {
        plimsoll::torch::TagScope activations(tags::activations);
        loss = torch::nn::functional::cross_entropy(model->forward(images), labels);
      }
      {
        plimsoll::torch::TagScope gradients(tags::gradients);
        loss.backward();
      }
      {
        plimsoll::torch::TagScope state(tags::optimizer_state);
        optimizer.step();
      }
    }
    plimsoll::bench::plan_recording::end();  // while the weights are live: the trace ends with what a job holds
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  CLI::App app{"Records a few ResNet-18 training steps under libtorch with plimsoll as its CPU allocator, for "
               "`plimsoll plan`"};
  app.add_option("--batch", options.batch, "batch size")->check(CLI::PositiveNumber);
  app.add_option("--image-size", options.image_size, "input height and width")->check(CLI::PositiveNumber);
  app.add_option("--classes", options.classes, "classes of the linear classifier")->check(CLI::PositiveNumber);
  app.add_option("--steps", options.steps, "training steps")->check(CLI::Range(1, 1000));
  app.add_option("--record", options.record, "the trace file to write")->required();
  CLI11_PARSE(app, argc, argv);
  try {
    run(options);
  } catch (const std::exception& error) {
    std::cerr << "plimsoll_plan_resnet18_record: " << error.what() << '\n';
    return 1;
  }
  return 0;
}
