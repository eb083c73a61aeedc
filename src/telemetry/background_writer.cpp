#include "telemetry/background_writer.hpp"

#include <unistd.h>

#include <cerrno>

namespace plimsoll::telemetry {

BackgroundWriter::BackgroundWriter(int fd, std::size_t buffer_bytes, std::size_t buffers)
    : fd_(fd), buffer_bytes_(buffer_bytes), unmade_buffers_(buffers < 2 ? 2 : buffers), thread_([this] { run(); }) {}

BackgroundWriter::~BackgroundWriter() { finish(); }

std::vector<char> BackgroundWriter::take_empty() {
  std::unique_lock lock(mutex_);
  if (spare_.empty() && unmade_buffers_ > 0) {
    --unmade_buffers_;
    lock.unlock();
    return std::vector<char>(buffer_bytes_);
  }
  buffer_free_.wait(lock, [this] { return !spare_.empty(); });
  std::vector<char> buffer = std::move(spare_.back());
  spare_.pop_back();
  return buffer;
}

void BackgroundWriter::submit(std::vector<char> buffer, std::size_t used) {
  {
    const std::lock_guard lock(mutex_);
    queued_.emplace_back(std::move(buffer), used);
  }
  work_ready_.notify_one();
}

int BackgroundWriter::finish() {
  {
    const std::lock_guard lock(mutex_);
    stop_ = true;
  }
  work_ready_.notify_one();
  if (thread_.joinable()) thread_.join();
  return error();
}

void BackgroundWriter::run() {
  std::unique_lock lock(mutex_);
  while (true) {
    work_ready_.wait(lock, [this] { return stop_ || !queued_.empty(); });
    if (queued_.empty()) return;  // stop_ and nothing left to write
    auto [buffer, used] = std::move(queued_.front());
    queued_.pop_front();
    lock.unlock();
    write_all(buffer.data(), used);
    lock.lock();
    spare_.push_back(std::move(buffer));
    buffer_free_.notify_one();
  }
}

void BackgroundWriter::write_all(const char* data, std::size_t bytes) {
  while (bytes > 0 && error() == 0) {
    const ssize_t written = ::write(fd_, data, bytes);
    if (written < 0) {
      if (errno == EINTR) continue;
      error_.store(errno, std::memory_order_relaxed);
      return;
    }
    data += written;
    bytes -= static_cast<std::size_t>(written);
  }
}

}  // namespace plimsoll::telemetry
