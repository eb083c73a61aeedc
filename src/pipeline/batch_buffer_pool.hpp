#pragma once
// The pipeline's recycling pool of batch buffers. Not thread-safe: the pipeline calls it under its own mutex.
//
// Invariants (checked by tests through the pipeline's metrics):
//  - owned() == idle + parked + handed out, and owned() <= limit() at every moment: the pool never allocates past
//    its limit, and the limit only grows.
//  - A parked buffer is reused only after its copy_done() returned true; until then it still counts as owned.
//  - Buffers are allocated only when none is idle or reusable, so a steady pipeline stops allocating.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <vector>

namespace plimsoll {
class Allocator;
}

namespace plimsoll::pipeline_detail {

/// Gives a buffer back to where it came from: the C heap, or the pipeline's buffer device.
struct BufferDeleter {
  Allocator* device = nullptr;
  void operator()(std::byte* bytes) const noexcept;
};

struct Buffer {
  std::unique_ptr<std::byte, BufferDeleter> bytes;
  std::function<bool()> copy_done;  ///< Set while parked.
};

class BatchBufferPool {
 public:
  /// `device`: where buffers are allocated (null: the C heap); it must outlive the pool.
  BatchBufferPool(std::uint64_t buffer_bytes, std::size_t limit, Allocator* device = nullptr)
      : buffer_bytes_(buffer_bytes), limit_(limit), device_(device) {}
  /// Waits until every parked buffer's copy_done() is true before the buffers are freed: a copy still reading a
  /// buffer (an asynchronous host-to-device copy out of pinned memory) must not see it reused by the next pool.
  ~BatchBufferPool() { wait_for_parked_copies(); }
  BatchBufferPool(BatchBufferPool&&) noexcept = default;
  /// Waits for this pool's parked copies as the destructor does, then takes `other`'s buffers.
  BatchBufferPool& operator=(BatchBufferPool&& other) noexcept;

  /// An idle buffer, a parked one whose copy has completed, or a new one while under the limit; null when none.
  /// Throws std::bad_alloc when the host is out of memory, OutOfMemory when the buffer device is.
  Buffer* try_acquire();
  void give_back(Buffer* buffer);
  void park(Buffer* buffer, std::function<bool()> copy_done);
  void raise_limit(std::size_t limit) noexcept;

  bool has_parked() const noexcept { return !parked_.empty(); }
  std::size_t owned() const noexcept { return all_.size(); }
  std::size_t idle() const noexcept { return idle_.size(); }
  std::size_t parked() const noexcept { return parked_.size(); }
  std::size_t limit() const noexcept { return limit_; }
  std::uint64_t buffer_bytes() const noexcept { return buffer_bytes_; }
  std::uint64_t allocations() const noexcept { return all_.size(); }

 private:
  std::uint64_t buffer_bytes_;
  std::size_t limit_;
  Allocator* device_ = nullptr;
  std::vector<std::unique_ptr<Buffer>> all_;  // owns every buffer; buffers are never freed before the pool
  std::vector<Buffer*> idle_;
  std::vector<Buffer*> parked_;

  void wait_for_parked_copies() noexcept;
};

}  // namespace plimsoll::pipeline_detail
