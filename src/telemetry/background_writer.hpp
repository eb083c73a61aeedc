#pragma once
// Writes a recording's full buffers to its file on a thread of its own, so the threads that allocate never wait
// for write(): the kernel's copy into the page cache costs about as much per event as the whole record does.
//
// Invariants:
// - At most `buffers` buffers exist: the one the producer fills plus those queued or being written. When every
//   one is queued, take_empty() waits for the writer: memory stays bounded when the disk is slower than the
//   program, and no event is dropped.
// - Buffers are written whole and in the order submitted, so the file is always a prefix of what was submitted.
// - After a failed write nothing more is written; error() holds its errno from then on.
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace plimsoll::telemetry {

class BackgroundWriter {
 public:
  /// Writes to `fd`, which the caller keeps open until finish() has returned.
  BackgroundWriter(int fd, std::size_t buffer_bytes, std::size_t buffers = 4);
  ~BackgroundWriter();  // finish()es if the owner did not
  BackgroundWriter(const BackgroundWriter&) = delete;
  BackgroundWriter& operator=(const BackgroundWriter&) = delete;

  /// An empty buffer of buffer_bytes capacity (size() == capacity); waits while every buffer is queued.
  std::vector<char> take_empty();
  /// Queues the first `used` bytes of `buffer` for writing; the buffer comes back through take_empty().
  void submit(std::vector<char> buffer, std::size_t used);
  /// Writes everything queued, stops the thread and returns the errno of the first failed write (0: none).
  /// Further calls return the same.
  int finish();
  /// The errno of the first failed write so far, 0 if none. Cheap: the producer checks it at every flush.
  int error() const { return error_.load(std::memory_order_relaxed); }

 private:
  void run();
  void write_all(const char* data, std::size_t bytes);

  const int fd_;
  const std::size_t buffer_bytes_;
  std::mutex mutex_;
  std::condition_variable work_ready_;   // the writer waits for a queued buffer or for stop_
  std::condition_variable buffer_free_;  // take_empty() waits for a spare buffer
  std::deque<std::pair<std::vector<char>, std::size_t>> queued_;  // buffer, bytes used
  std::vector<std::vector<char>> spare_;
  std::size_t unmade_buffers_;  // buffers not yet allocated: made on demand, so a short recording stays small
  bool stop_ = false;
  std::atomic<int> error_{0};
  std::thread thread_;  // last: starts after every member it reads is constructed
};

}  // namespace plimsoll::telemetry
