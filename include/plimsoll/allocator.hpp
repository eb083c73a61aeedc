#pragma once
// One device's memory: the object every allocation goes through.
//
// Path of an allocation: Allocator::allocate (this file; lock, tags, stats, OOM report)
//   -> engine::Heap (src/engine: best-fit over two-level bins, coalescing, granule mapping)
//   -> backings::Backing (src/backings: host mmap, simulated device, later CUDA) .
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "plimsoll/device.hpp"
#include "plimsoll/oom.hpp"
#include "plimsoll/policy.hpp"
#include "plimsoll/stats.hpp"

namespace plimsoll {

namespace backings { class Backing; }
class Recording;

/// What a device was created with, after defaults were applied.
struct DeviceDescription {
  std::string name;          // "cuda:0", "cpu/1", "sim:16GiB"
  std::string hardware;      // "NVIDIA H100 80GB HBM3", "host", "simulated device"
  Policy policy;             // with the defaults filled in
  std::uint64_t limit_bytes = 0;
  std::uint64_t total_bytes = 0;  // of the physical device
  std::string summary() const;    // the "Created device ..." line
};

/// A device's limits as the runtime worked them out: the limit in bytes, and the policy it came from with its
/// defaults filled in. The allocator applies the policy's growth, reserve and release threshold as they are and
/// never derives a limit from its memory_limit or memory_fraction: limit_bytes is the limit.
struct DeviceLimits {
  Policy policy;
  std::uint64_t limit_bytes = 0;
};

/// A small integer naming a tag ("weights", "activations"). Interned once, cheap to pass on every call.
using Tag = std::uint16_t;
inline constexpr Tag kUntagged = 0;
/// Interns a tag name (process-wide, thread-safe). At most 65535 distinct tags.
Tag intern_tag(std::string_view name);
std::string_view tag_name(Tag tag);

/// A CUDA stream (a CUstream or cudaStream_t; nullptr is the legacy default stream), opaque to plimsoll. On a
/// CUDA device, memory freed on a stream is reused at once by that stream and by the others once the stream's
/// work queued before the free has completed (docs/engine.md, "CUDA backings and streams"). Host and simulated
/// devices run in program order and ignore streams.
struct Stream {
  void* handle = nullptr;
};

class Allocator {
 public:
  /// A device over an explicit backing. Most code gets its allocators from Runtime instead.
  Allocator(DeviceDescription description, std::unique_ptr<backings::Backing> backing);
  ~Allocator();
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  /// Returns memory aligned to 256 bytes (at least). Throws OutOfMemory with the full report.
  /// Zero bytes gives a unique non-null pointer that must be freed like any other.
  void* allocate(std::size_t bytes, Tag tag = kUntagged);
  void* allocate(std::size_t bytes, std::string_view tag) { return allocate(bytes, intern_tag(tag)); }
  /// Like allocate, but returns nullptr instead of throwing (the OOM is still counted in stats()).
  void* try_allocate(std::size_t bytes, Tag tag = kUntagged) noexcept;
  /// Throws InvalidFree (with the address) for an address that is not live; nothing is changed then.
  /// Without a stream, a CUDA device cannot know which streams still use the block: it is free at once, and the
  /// next unmap of cached memory waits for the whole device (cuCtxSynchronize) first. Prefer the stream overload.
  void deallocate(void* ptr);

  /// `stream`: where the memory is first used. May take a block freed on `stream` whose work is still queued.
  void* allocate(std::size_t bytes, Stream stream, Tag tag = kUntagged);
  void* try_allocate(std::size_t bytes, Stream stream, Tag tag = kUntagged) noexcept;
  /// `stream`: where the memory was last used (its allocation stream, unless record_stream says more). The block
  /// is parked behind an event on `stream`: `stream` may reuse it at once, every stream once the event completed.
  void deallocate(void* ptr, Stream stream);
  /// The live allocation at `ptr` is also used on `stream` (torch's record_stream): when it is freed, nobody
  /// reuses it before the work queued on `stream` up to the free has completed. Throws InvalidArgument for a
  /// pointer that is not a live allocation. No effect on host and simulated devices.
  void record_stream(void* ptr, Stream stream);
  /// Whether this device orders reuse by streams (a CUDA device whose driver has events); false on host and
  /// simulated devices, which ignore streams.
  bool stream_ordered() const noexcept;
  /// True when `ptr` is the start of a live allocation of this device.
  bool owns(const void* ptr) const;

  /// Appends this device's events (allocations, frees, maps, unmaps, OOMs) to `recording`, from now on;
  /// nullptr stops. The device holds a reference, so the recording stays open while it is attached.
  void record_to(std::shared_ptr<Recording> recording);
  /// The device's memory as JSON: its mapped segments and every block in them (address, size, requested size,
  /// allocated or free, tag, and the call site when a recording with call sites is attached). For looking at
  /// fragmentation and at who holds what; it walks the whole heap, so it is not for hot paths.
  std::string snapshot() const;

  /// Returns cached free memory to the backing; returns the bytes released. On a CUDA device it first waits for
  /// the work queued before every parked free (stream-ordered reuse), so that their blocks can go too.
  std::uint64_t trim();
  /// Peak in-use and reserved bytes (and each tag's peak) start again from the current values.
  void reset_peaks();
  Stats stats() const;
  /// In-use and reserved bytes alone, for sampling after every operation (timelines): two counters read under
  /// the lock, where stats() also searches the heap for its largest free block and scans host page tables.
  MemoryUsage usage() const;
  const DeviceDescription& description() const noexcept;
  /// Replaces the device's limits with ones the runtime worked out (Runtime::configure; src/runtime/budget.hpp is
  /// the one place a policy becomes a limit). Throws InvalidState after the first allocation, as TensorFlow does.
  void set_limits(const DeviceLimits& limits);

  struct Impl;

 private:
  void* allocate_with_streams(std::size_t bytes, const void* stream, Tag tag);

  std::unique_ptr<Impl> impl_;
};

}  // namespace plimsoll
