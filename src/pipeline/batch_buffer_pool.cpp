#include "pipeline/batch_buffer_pool.hpp"

#include <algorithm>
#include <new>
#include <thread>
#include <utility>

#include "plimsoll/allocator.hpp"

namespace plimsoll::pipeline_detail {
namespace {

// Cache-line aligned, so float and int64 fields and SIMD loads in the consumer are aligned.
constexpr std::size_t kBufferAlignment = 64;

}  // namespace

void BufferDeleter::operator()(std::byte* bytes) const noexcept {
  if (device == nullptr) {
    std::free(bytes);
    return;
  }
  try {
    device->deallocate(bytes);
  } catch (...) {  // cannot happen: the pool frees each buffer it allocated once
  }
}

Buffer* BatchBufferPool::try_acquire() {
  if (!idle_.empty()) {
    Buffer* buffer = idle_.back();
    idle_.pop_back();
    return buffer;
  }
  const auto done = std::find_if(parked_.begin(), parked_.end(), [](Buffer* b) { return b->copy_done(); });
  if (done != parked_.end()) {
    Buffer* buffer = *done;
    parked_.erase(done);
    buffer->copy_done = nullptr;
    return buffer;
  }
  if (all_.size() >= limit_) return nullptr;
  auto buffer = std::make_unique<Buffer>();
  if (device_ != nullptr) {
    // The device's blocks are 256-byte aligned, more than the cache line asked of the C heap below.
    static const Tag tag = intern_tag("pipeline batches");
    buffer->bytes = std::unique_ptr<std::byte, BufferDeleter>(
        static_cast<std::byte*>(device_->allocate(buffer_bytes_, tag)), BufferDeleter{device_});
  } else {
    buffer->bytes.reset(static_cast<std::byte*>(std::aligned_alloc(kBufferAlignment, buffer_bytes_)));
  }
  if (!buffer->bytes) throw std::bad_alloc();
  all_.push_back(std::move(buffer));
  // Room for every buffer in either list, so give_back and park never allocate: they run in Batch's destructor.
  idle_.reserve(all_.size());
  parked_.reserve(all_.size());
  return all_.back().get();
}

BatchBufferPool& BatchBufferPool::operator=(BatchBufferPool&& other) noexcept {
  wait_for_parked_copies();
  buffer_bytes_ = other.buffer_bytes_;
  limit_ = other.limit_;
  device_ = other.device_;
  all_ = std::move(other.all_);
  idle_ = std::move(other.idle_);
  parked_ = std::move(other.parked_);
  return *this;
}

void BatchBufferPool::wait_for_parked_copies() noexcept {
  for (Buffer* buffer : parked_) {
    try {
      while (!buffer->copy_done()) std::this_thread::yield();
    } catch (...) {
      // A copy_done that throws cannot say when its copy ends; the buffer is freed as the pipeline ends, as before.
    }
  }
}

void BatchBufferPool::give_back(Buffer* buffer) { idle_.push_back(buffer); }

void BatchBufferPool::park(Buffer* buffer, std::function<bool()> copy_done) {
  buffer->copy_done = std::move(copy_done);
  parked_.push_back(buffer);
}

void BatchBufferPool::raise_limit(std::size_t limit) noexcept { limit_ = std::max(limit_, limit); }

}  // namespace plimsoll::pipeline_detail
