#pragma once
// The schedule of a two-stage pipeline over micro-batches (`plimsoll train --model-parallel 2`), GPipe's: the first
// stage runs every micro-batch's forward pass, handing each output to the second stage as soon as it is made; the
// second stage runs forward and backward on each as it arrives and hands the gradient of its input back; the first
// stage then runs its backward passes as those gradients come. While the first stage computes micro-batch i+1, the
// second computes micro-batch i: both work at once.
//
// The stages run on two threads (the first on the caller's) joined by two StageQueues. What each stage does is the
// caller's (the callables below), so this file knows nothing of libtorch and a threads_ test checks the schedule
// under ThreadSanitizer with plain values.
#include <cstddef>
#include <exception>
#include <optional>
#include <thread>
#include <type_traits>
#include <utility>

#include "train/stage_queue.hpp"

namespace plimsoll::train {

/// Runs one step of `micro_batches` micro-batches through the two stages and returns when all are done:
///   first_forward(i) -> Activation           on the caller's thread, i = 0, 1, ... in order;
///   second_step(i, Activation) -> Gradient   on the second stage's thread, in the same order;
///   first_backward(i, Gradient)              on the caller's thread, in the same order, after every forward.
/// second_thread_start() runs once on the second stage's thread before its first micro-batch (its device scope,
/// its compute threads). At most `in_flight` activations wait between the stages (the first stage blocks when the
/// second falls that far behind); the gradients' queue holds all of them, so the second stage never waits on the
/// first while the first is still in its forward passes (a smaller one could deadlock the two).
/// An exception on either stage closes both queues, so the other stage stops at its next hand-off; once both have
/// stopped it is rethrown here (the caller's first when both threw). What was in flight is destroyed.
template <class FirstForward, class SecondStep, class FirstBackward, class SecondThreadStart>
void run_two_stage_pipeline(std::size_t micro_batches, std::size_t in_flight, FirstForward&& first_forward,
                            SecondStep&& second_step, FirstBackward&& first_backward,
                            SecondThreadStart&& second_thread_start) {
  using Activation = std::decay_t<std::invoke_result_t<FirstForward&, std::size_t>>;
  using Gradient = std::decay_t<std::invoke_result_t<SecondStep&, std::size_t, Activation>>;
  StageQueue<std::pair<std::size_t, Activation>> activations(in_flight);
  StageQueue<std::pair<std::size_t, Gradient>> gradients(micro_batches);
  const auto stop_both = [&] {
    activations.close();
    gradients.close();
  };

  std::exception_ptr second_error;
  std::thread second([&] {
    try {
      second_thread_start();
      for (std::size_t i = 0; i < micro_batches; ++i) {
        std::optional<std::pair<std::size_t, Activation>> input = activations.pop();
        if (!input) return;  // the first stage failed
        Gradient gradient = second_step(input->first, std::move(input->second));
        if (!gradients.push({input->first, std::move(gradient)})) return;
      }
    } catch (...) {
      second_error = std::current_exception();
      stop_both();
    }
  });

  std::exception_ptr first_error;
  try {
    bool running = true;
    for (std::size_t i = 0; i < micro_batches && running; ++i) running = activations.push({i, first_forward(i)});
    for (std::size_t i = 0; i < micro_batches && running; ++i) {
      std::optional<std::pair<std::size_t, Gradient>> gradient = gradients.pop();
      if (!gradient) break;  // the second stage failed
      first_backward(gradient->first, std::move(gradient->second));
    }
  } catch (...) {
    first_error = std::current_exception();
    stop_both();
  }
  second.join();
  if (first_error) std::rethrow_exception(first_error);
  if (second_error) std::rethrow_exception(second_error);
}

}  // namespace plimsoll::train
