// The hand-off between the stages of `plimsoll train --model-parallel` (src/train/stage_queue.hpp) and the pipeline
// schedule over it (src/train/pipeline_schedule.hpp), with plain values instead of tensors so ThreadSanitizer
// checks them (label threads): order, the bound, close() waking both sides, both stages working at once, and a
// failure on either stage stopping the other instead of leaving it waiting.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "train/pipeline_schedule.hpp"
#include "train/stage_queue.hpp"

namespace {

using plimsoll::train::run_two_stage_pipeline;
using plimsoll::train::StageQueue;

TEST(StageQueue, HandsItemsOverInOrderAndNeverHoldsMoreThanItsCapacity) {
  constexpr int kItems = 2000;
  StageQueue<int> queue(3);
  std::atomic<std::size_t> most_held{0};
  std::thread producer([&] {
    for (int i = 0; i < kItems; ++i) {
      ASSERT_TRUE(queue.push(i));
      const std::size_t held = queue.size();
      std::size_t seen = most_held.load();
      while (held > seen && !most_held.compare_exchange_weak(seen, held)) {
      }
    }
  });
  std::vector<int> received;
  for (int i = 0; i < kItems; ++i) {
    std::optional<int> item = queue.pop();
    ASSERT_TRUE(item.has_value());
    received.push_back(*item);
  }
  producer.join();
  for (int i = 0; i < kItems; ++i) ASSERT_EQ(received[static_cast<std::size_t>(i)], i);
  EXPECT_LE(most_held.load(), queue.capacity());
  EXPECT_EQ(queue.size(), 0u);
}

TEST(StageQueue, CloseWakesAConsumerWaitingOnAnEmptyQueue) {
  StageQueue<std::string> queue(1);
  std::optional<std::string> got = std::string("not yet");
  std::thread consumer([&] { got = queue.pop(); });
  queue.close();
  consumer.join();
  EXPECT_FALSE(got.has_value());
  EXPECT_FALSE(queue.push("late")) << "a closed queue takes nothing";
  EXPECT_TRUE(queue.closed());
}

TEST(StageQueue, CloseWakesAProducerWaitingOnAFullQueueAndDropsWhatWasLeft) {
  StageQueue<int> queue(1);
  ASSERT_TRUE(queue.push(1));
  std::atomic<bool> second_push_result{true};
  std::thread producer([&] { second_push_result = queue.push(2); });  // waits: the queue is full
  queue.close();
  producer.join();
  EXPECT_FALSE(second_push_result.load());
  EXPECT_FALSE(queue.pop().has_value()) << "a closed queue hands out nothing, even what it still holds";
}

TEST(StageQueue, ZeroCapacityIsTakenAsOne) {
  StageQueue<int> queue(0);
  EXPECT_EQ(queue.capacity(), 1u);
  ASSERT_TRUE(queue.push(7));
  EXPECT_EQ(queue.pop(), 7);
}

// What each stage saw, in order, with the thread it ran on.
struct Log {
  std::mutex mutex;
  std::vector<std::string> events;
  void add(const std::string& event) {
    std::lock_guard lock(mutex);
    events.push_back(event);
  }
};

TEST(PipelineSchedule, EveryMicroBatchGoesForwardThroughBothStagesAndBackInOrder) {
  constexpr std::size_t kMicro = 6;
  const std::thread::id caller = std::this_thread::get_id();
  std::vector<std::string> first_stage;  // only the caller's thread writes it
  std::vector<int> second_inputs;        // only the second stage's thread writes it; read after the join
  std::thread::id second_thread;
  bool second_thread_started_first = false;
  run_two_stage_pipeline(
      kMicro, 1,
      [&](std::size_t i) {
        EXPECT_EQ(std::this_thread::get_id(), caller);
        first_stage.push_back("forward " + std::to_string(i));
        return static_cast<int>(10 * i);
      },
      [&](std::size_t i, int activation) {
        EXPECT_NE(std::this_thread::get_id(), caller);
        EXPECT_EQ(std::this_thread::get_id(), second_thread);
        second_inputs.push_back(activation);
        return std::to_string(i) + ":" + std::to_string(activation + 1);
      },
      [&](std::size_t i, std::string gradient) {
        EXPECT_EQ(std::this_thread::get_id(), caller);
        first_stage.push_back("backward " + std::to_string(i) + " with " + gradient);
      },
      [&] {
        second_thread = std::this_thread::get_id();
        second_thread_started_first = second_inputs.empty();
      });
  EXPECT_TRUE(second_thread_started_first);
  ASSERT_EQ(second_inputs.size(), kMicro);
  ASSERT_EQ(first_stage.size(), 2 * kMicro);
  for (std::size_t i = 0; i < kMicro; ++i) {
    EXPECT_EQ(second_inputs[i], static_cast<int>(10 * i));
    // GPipe: every forward pass first, then the backward passes in the same order.
    EXPECT_EQ(first_stage[i], "forward " + std::to_string(i));
    EXPECT_EQ(first_stage[kMicro + i],
              "backward " + std::to_string(i) + " with " + std::to_string(i) + ":" + std::to_string(10 * i + 1));
  }
}

// Both stages at once: the second stage's work on micro-batch 0 waits until the first stage has started micro-batch
// 1. A schedule that ran the stages one after the other would never get there; the wait is bounded so that such a
// schedule fails the test instead of hanging it.
TEST(PipelineSchedule, TheFirstStageComputesTheNextMicroBatchWhileTheSecondComputesThisOne) {
  std::mutex mutex;
  std::condition_variable changed;
  bool first_started_micro_batch_1 = false;
  bool second_saw_overlap = false;
  run_two_stage_pipeline(
      3, 2,
      [&](std::size_t i) {
        if (i == 1) {
          std::lock_guard lock(mutex);
          first_started_micro_batch_1 = true;
          changed.notify_all();
        }
        return i;
      },
      [&](std::size_t i, std::size_t activation) {
        if (i == 0) {
          std::unique_lock lock(mutex);
          second_saw_overlap =
              changed.wait_for(lock, std::chrono::seconds(30), [&] { return first_started_micro_batch_1; });
        }
        return activation;
      },
      [](std::size_t, std::size_t) {}, [] {});
  EXPECT_TRUE(second_saw_overlap) << "the first stage did not start micro-batch 1 while the second held micro-batch 0";
}

TEST(PipelineSchedule, ManyMicroBatchesThroughASingleSlotDoNotDeadlock) {
  constexpr std::size_t kMicro = 64;
  std::size_t backward_calls = 0;
  long sum = 0;
  run_two_stage_pipeline(
      kMicro, 1, [](std::size_t i) { return static_cast<long>(i); },
      [](std::size_t, long activation) { return 2 * activation; },
      [&](std::size_t, long gradient) {
        ++backward_calls;
        sum += gradient;
      },
      [] {});
  EXPECT_EQ(backward_calls, kMicro);
  EXPECT_EQ(sum, static_cast<long>(kMicro * (kMicro - 1)));
}

TEST(PipelineSchedule, AFailureOnTheSecondStageStopsTheFirstAndIsRethrownToTheCaller) {
  std::atomic<int> backward_calls{0};
  std::atomic<int> second_calls{0};
  try {
    run_two_stage_pipeline(
        8, 1, [](std::size_t i) { return i; },
        [&](std::size_t i, std::size_t activation) {
          ++second_calls;
          if (i == 2) throw std::runtime_error("stage 1 ran out of memory");
          return activation;
        },
        [&](std::size_t, std::size_t) { ++backward_calls; }, [] {});
    FAIL() << "the second stage's failure was not rethrown";
  } catch (const std::runtime_error& error) {
    EXPECT_STREQ(error.what(), "stage 1 ran out of memory");
  }
  EXPECT_EQ(second_calls.load(), 3) << "the second stage went on after it failed";
  // The first stage's backward passes start only after all its forwards, which the failure cut short.
  EXPECT_EQ(backward_calls.load(), 0);
}

TEST(PipelineSchedule, AFailureOnTheFirstStageStopsTheSecondAndIsRethrownToTheCaller) {
  std::atomic<int> second_calls{0};
  try {
    run_two_stage_pipeline(
        8, 2,
        [](std::size_t i) {
          if (i == 3) throw std::runtime_error("stage 0 ran out of memory");
          return i;
        },
        [&](std::size_t, std::size_t activation) {
          ++second_calls;
          return activation;
        },
        [](std::size_t, std::size_t) {}, [] {});
    FAIL() << "the first stage's failure was not rethrown";
  } catch (const std::runtime_error& error) {
    EXPECT_STREQ(error.what(), "stage 0 ran out of memory");
  }
  EXPECT_LE(second_calls.load(), 3) << "the second stage computed micro-batches that were never made";
}

TEST(PipelineSchedule, AFailureInABackwardPassStopsThePipeline) {
  std::atomic<int> backward_calls{0};
  EXPECT_THROW(run_two_stage_pipeline(
                   4, 1, [](std::size_t i) { return i; }, [](std::size_t, std::size_t a) { return a; },
                   [&](std::size_t i, std::size_t) {
                     ++backward_calls;
                     if (i == 1) throw std::logic_error("backward failed");
                   },
                   [] {}),
               std::logic_error);
  EXPECT_EQ(backward_calls.load(), 2);
}

}  // namespace
