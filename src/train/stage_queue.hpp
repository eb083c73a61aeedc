#pragma once
// The hand-off between two pipeline stages (`plimsoll train --model-parallel`): a queue of at most `capacity` items
// that blocks the producer while it is full and the consumer while it is empty. close() wakes both sides for good,
// so a stage that fails (an out-of-memory on its device) never leaves the other waiting. Header-only and free of
// libtorch (C++17 and C++20), so a threads_ test runs it under ThreadSanitizer with plain values.
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <optional>
#include <utility>

namespace plimsoll::train {

template <class T>
class StageQueue {
 public:
  /// capacity 0 is taken as 1: a queue that can hold nothing would block its producer forever.
  explicit StageQueue(std::size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {}
  StageQueue(const StageQueue&) = delete;
  StageQueue& operator=(const StageQueue&) = delete;

  /// Waits for room, then appends `item`. False (and `item` dropped) when the queue was closed first.
  bool push(T item) {
    std::unique_lock lock(mutex_);
    not_full_.wait(lock, [&] { return closed_ || items_.size() < capacity_; });
    if (closed_) return false;
    items_.push_back(std::move(item));
    not_empty_.notify_one();
    return true;
  }

  /// Waits for an item and takes the oldest. Nothing once the queue is closed, even if items are left: a closed
  /// queue means the step is being abandoned, and what is left is freed with the queue.
  std::optional<T> pop() {
    std::unique_lock lock(mutex_);
    not_empty_.wait(lock, [&] { return closed_ || !items_.empty(); });
    if (closed_) return std::nullopt;
    std::optional<T> item(std::move(items_.front()));
    items_.pop_front();
    not_full_.notify_one();
    return item;
  }

  /// Wakes every waiter; from now on push() and pop() return at once with nothing.
  void close() {
    std::lock_guard lock(mutex_);
    closed_ = true;
    not_full_.notify_all();
    not_empty_.notify_all();
  }

  bool closed() const {
    std::lock_guard lock(mutex_);
    return closed_;
  }

  std::size_t size() const {
    std::lock_guard lock(mutex_);
    return items_.size();
  }

  std::size_t capacity() const noexcept { return capacity_; }

 private:
  const std::size_t capacity_;
  mutable std::mutex mutex_;
  std::condition_variable not_full_, not_empty_;
  std::deque<T> items_;
  bool closed_ = false;
};

}  // namespace plimsoll::train
