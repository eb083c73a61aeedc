#pragma once
// Which device and tag the process's threads are scoped to, counted over all threads, so that a thread with no
// scope of its own can follow the process. libtorch starts at::parallel_for's OpenMP workers without plimsoll's
// thread-locals; with the census, a worker allocating for a caller inside DeviceScope(cpu/1) lands on cpu/1.
// C++17: included by cpu_allocator.cpp.
#include <atomic>
#include <cstddef>
#include <map>
#include <mutex>

namespace plimsoll::torch {

/// Counts, per value, the threads whose innermost scope names it. `T{}` (nullptr, tag 0) stands for "no scope" and
/// is never counted.
template <class T>
class ScopeCensus {
 public:
  /// A thread's innermost value changes from `before` to `after` (a scope opens or closes).
  void replace(T before, T after) {
    if (before == after) return;
    std::lock_guard<std::mutex> lock(mutex_);
    if (before != T{}) {
      const auto found = counts_.find(before);
      if (found != counts_.end() && --found->second == 0) counts_.erase(found);
    }
    if (after != T{}) ++counts_[after];
    // Invariant: every count is positive, and sole_ is the only key when there is exactly one, else T{}.
    sole_.store(counts_.size() == 1 ? counts_.begin()->first : T{}, std::memory_order_release);
  }

  /// The value every scoped thread agrees on; T{} when no thread is scoped or scoped threads disagree (then an
  /// unscoped thread cannot know whose work it is doing, and takes the default).
  T sole() const noexcept { return sole_.load(std::memory_order_acquire); }

 private:
  std::mutex mutex_;
  std::map<T, std::size_t> counts_;
  std::atomic<T> sole_{};
};

}  // namespace plimsoll::torch
