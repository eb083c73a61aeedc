#pragma once
// Independent jobs on a few threads, with results the same as a serial loop's: the offline packer's greedy
// packings and searches (run_packing.cpp) take minutes on a whole trace and share nothing but read-only input.
//  - work(i) runs on a worker thread for each i in [0, n), at most `threads` at once (0 or 1: on the caller, in
//    order, as a plain loop: no thread is started);
//  - done(i, result) runs on the calling thread only, as each job finishes (finish order), so progress lines are
//    written from one thread and never interleave;
//  - the results come back in index order, so a caller that picks the best in that order picks what the serial
//    loop picks, whatever the finish order;
//  - a job's exception (std::bad_alloc on a big trace) stops the jobs not yet started and is rethrown on the
//    caller once every worker has been joined (the lowest index's, when several threw); one thrown by done too.
// Invariant: no worker outlives run_ordered; work(i) runs at most once for each i.
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

namespace plimsoll::engine {

template <class Result, class Work, class Done>
std::vector<Result> run_ordered(std::size_t n, std::size_t threads, Work&& work, Done&& done) {
  std::vector<std::optional<Result>> results(n);
  if (threads <= 1 || n <= 1) {
    for (std::size_t i = 0; i < n; ++i) {
      results[i].emplace(work(i));
      done(i, *results[i]);
    }
  } else {
    std::mutex mutex;  // guards everything below it up to the threads
    std::condition_variable changed;
    std::deque<std::size_t> finished;  // jobs done (or failed) that the caller has not reported yet
    std::vector<std::exception_ptr> errors(n);
    std::size_t next = 0;     // the next job to start
    std::size_t running = 0;  // workers not yet returned
    bool stop = false;        // a job or done threw: start nothing more
    const auto worker = [&] {
      for (;;) {
        std::size_t i = 0;
        {
          const std::lock_guard lock(mutex);
          if (stop || next == n) break;
          i = next++;
        }
        std::optional<Result> result;
        std::exception_ptr error;
        try {
          result.emplace(work(i));
        } catch (...) {
          error = std::current_exception();
        }
        {
          const std::lock_guard lock(mutex);
          results[i] = std::move(result);
          errors[i] = error;
          if (error) stop = true;
          finished.push_back(i);
        }
        changed.notify_one();
      }
      {
        const std::lock_guard lock(mutex);
        --running;
      }
      changed.notify_one();
    };
    std::vector<std::thread> pool;
    std::exception_ptr caller_error;
    try {
      for (std::size_t t = 0; t < threads && t < n; ++t) {
        {
          const std::lock_guard lock(mutex);
          ++running;
        }
        try {
          pool.emplace_back(worker);
        } catch (...) {
          const std::lock_guard lock(mutex);
          --running;
          if (pool.empty()) throw;  // not one thread: nothing runs the jobs
          break;                    // fewer threads than asked: those started take every job
        }
      }
      std::unique_lock lock(mutex);
      for (;;) {
        changed.wait(lock, [&] { return !finished.empty() || running == 0; });
        if (finished.empty()) break;
        const std::size_t i = finished.front();
        finished.pop_front();
        if (errors[i]) continue;
        lock.unlock();
        done(i, *results[i]);
        lock.lock();
      }
    } catch (...) {
      caller_error = std::current_exception();
      const std::lock_guard lock(mutex);
      stop = true;
    }
    for (std::thread& thread : pool) thread.join();
    if (caller_error) std::rethrow_exception(caller_error);
    for (const std::exception_ptr& error : errors)
      if (error) std::rethrow_exception(error);
  }
  std::vector<Result> ordered;
  ordered.reserve(n);
  for (std::optional<Result>& result : results) ordered.push_back(std::move(*result));
  return ordered;
}

}  // namespace plimsoll::engine
