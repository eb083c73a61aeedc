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
#include "plimsoll/step_plan_options.hpp"

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

/// How to pause a device (Allocator::pause).
struct PauseOptions {
  /// Copy the live contents to host memory (pinned on a GPU) before unmapping, and back on resume. Without it,
  /// resume() gives back memory at the same addresses whose contents are undefined (what a job that reloads its
  /// state anyway wants: no copy, no host memory).
  bool keep_contents = false;
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
  /// pointer that is not a live allocation. No effect on host and simulated devices. Out of host memory it still
  /// holds (the free then waits for the whole device instead: docs/engine.md, "Stream-ordered reuse"); only when
  /// that fallback's fixed room is taken too, std::bad_alloc with nothing changed (the block's streams as before).
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

  /// A training-step boundary (plimsoll::step() calls it on every device; replays call it at each step of the
  /// trace). From the first boundary on, the device watches each step; after one step it packs a plan of the
  /// step offline and places the matching requests of later steps at their planned addresses, falling back to
  /// best fit for the rest (docs/engine.md, "Step-aware placement"; Stats::step_plan counts both). No effect on
  /// devices that order reuse by streams, or when turned off.
  void step();
  /// Step-aware placement on (the default) or off. Off, step() does nothing and every request takes best fit;
  /// blocks already placed by a plan stay valid.
  void set_step_plan(bool enabled);
  /// Step-aware placement's options for this device (step_plan_options.hpp). A change drops the plan being followed
  /// (planned blocks stay valid), and the next boundaries pack again with the new options.
  void set_step_plan_options(const StepPlanOptions& options);
  /// Loads a run plan (docs/engine.md, "Run plans"): the placements of a whole run, from its first allocation
  /// through a step, packed offline from a trace of an earlier run of the same job (`plimsoll run-plan TRACE -o
  /// PLAN`). Request i of the device then goes to the plan's address for request i while its rounded size is the
  /// planned one and the range is free under the limit; the first request that does not match ends the plan for
  /// good, and it and every later request take the normal path (best fit, step plans from the next boundary). The
  /// plan places every request while it is active, small ones too: the per-thread caches serve none meanwhile.
  /// Stats::run_plan counts what it placed and why it ended. Returns empty when the plan will be followed, else why
  /// it is ignored (packed for another granule or another limit: the device runs as without one). Throws
  /// InvalidArgument naming the file for a missing or malformed plan, InvalidState after the device's first
  /// allocation (load it before). set_limits() drops a loaded plan (it was checked against the old limit): load it
  /// again after.
  std::string set_run_plan(const std::string& path);
  /// Returns cached free memory to the backing; returns the bytes released. On a CUDA device it first waits for
  /// the work queued before every parked free (stream-ordered reuse), so that their blocks can go too.
  std::uint64_t trim();
  /// Gives the device's memory back without ending the process (docs/engine.md, "Pause and resume"): cached memory
  /// is released, the live contents copied to host memory if asked, and every granule unmapped, while every
  /// address stays reserved, so pointers the program holds stay valid across resume(). Reserved bytes drop to 0;
  /// over a GPU share the ledger counts the memory free for other processes. While paused, allocations are refused
  /// (allocate throws InvalidState, try_allocate returns nullptr; nothing blocks) and frees are taken. Waits for
  /// the device's queued work first. Returns the bytes unmapped. Throws InvalidState when paused already, on a
  /// preallocated device (one segment, held for life: use the on_demand policy), or when the contents cannot be
  /// kept (a simulated device); Error when host memory or a copy is refused. Nothing is lost on a throw.
  std::uint64_t pause(PauseOptions options = {});
  /// Throws the InvalidState pause(options) would refuse with for this device's kind (paused already, preallocated,
  /// contents that cannot be kept), touching nothing: devices paused together check each before pausing any.
  void check_pausable(PauseOptions options = {}) const;
  /// Maps the same granules back at the same addresses (and copies the contents back). Throws InvalidState when
  /// not paused; PauseError when the memory is not available again (other processes took it): the device stays
  /// paused, nothing lost, and resume() may be called again (Error when copying the contents back failed: the same).
  void resume();
  bool paused() const;
  /// What resume() maps back (0 when not paused).
  std::uint64_t paused_bytes() const;

  /// Peak in-use and reserved bytes (and each tag's peak) start again from the current values.
  void reset_peaks();
  Stats stats() const;
  /// In-use and reserved bytes alone, for sampling after every operation (timelines): two counters read under
  /// the lock, where stats() also searches the heap for its largest free block and scans host page tables.
  MemoryUsage usage() const;
  /// A copy, taken under the device's lock: set_limits may change the limits and policy meanwhile.
  DeviceDescription description() const;
  /// Replaces the device's limits with ones the runtime worked out (Runtime::configure; src/runtime/budget.hpp is
  /// the one place a policy becomes a limit). Throws InvalidState after the first allocation, as TensorFlow does.
  void set_limits(const DeviceLimits& limits);
  /// Per-thread caches for requests up to 64 KiB, and up to 1 MiB once two threads use the device (docs/engine.md,
  /// "Threads"): each thread keeps up to `bytes_per_thread` bytes of blocks it freed (whichever thread allocated them)
  /// and allocates from them without the device lock. 0 turns them off and gives their blocks back. Cached blocks are
  /// free for the program (not in in_use_bytes) and stay mapped (in reserved_bytes); trim(), running out of memory and
  /// a thread's exit give them back. Off by default; throws InvalidState on a device that orders reuse by streams.
  void set_thread_cache(std::uint64_t bytes_per_thread);
  /// The per-thread cache's bytes per thread; 0 while off. The policy's `thread_cache` sets it when the device is
  /// made (and by set_limits), on devices that do not order reuse by streams.
  std::uint64_t thread_cache() const;

  struct Impl;

 private:
  friend struct RunPlanLoader;  // set_run_plan with a plan in memory (src/engine/run_plan_follower.hpp)
  void* allocate_with_streams(std::size_t bytes, const void* stream, Tag tag);
  struct Attempt;  // one locked attempt: an address, or 0 and why (allocator.cpp)
  [[gnu::noinline]] void* allocate_reporting(std::size_t bytes, Tag tag, const Attempt& first);
  /// allocate()'s side past a front hit, out of line, so the hit saves no registers: everything allocate() did before
  /// the hit was split off (`front_asked`: the front was asked already and declined, so it is not asked again).
  [[gnu::noinline]] void* allocate_past_front(std::size_t bytes, Tag tag, bool front_asked);
  /// allocate_past_front after the front declined: what the front calls instead of answering 0
  /// (engine::ThreadCaches::allocate_or), so allocate() tail-calls the front.
  static std::uint64_t front_declined(void* self, std::uint64_t bytes, std::uint16_t tag);
  /// deallocate()'s side under the device lock, out of line: a free the per-thread caches take builds no frame.
  [[gnu::noinline]] void deallocate_in_heap(void* ptr);

  std::unique_ptr<Impl> impl_;
};

}  // namespace plimsoll
