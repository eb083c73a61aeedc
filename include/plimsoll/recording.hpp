#pragma once
// Recording what allocators do, to a trace file (docs/trace-format.md) that `plimsoll replay`, `plimsoll leaks`
// and the timeline outputs read back.
//
//   auto recording = plimsoll::Recording::open("run.plimsoll", {.call_sites = true});
//   device.record_to(recording);
//   for (...) { plimsoll::step(); train_one_step(); }
//   recording->close();  // or let the last reference go
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace plimsoll {

class Allocator;
namespace engine {
class AllocationObserver;
}

struct RecordingOptions {
  /// Capture the stack of every allocation and name its call site (the first frame outside plimsoll, libtorch
  /// and c10) in the trace. Costs a stack walk per allocation (docs/benchmarks.md has the figure); symbolizing
  /// happens once, at close().
  bool call_sites = false;
  /// Events are buffered and written when this many bytes are pending: memory stays bounded however long
  /// the run. Small enough to stay in a core's L2 cache, so the kernel copies it out of cache on write().
  std::size_t buffer_bytes = std::size_t{256} << 10;
};

/// One trace file being written. Allocators attached with Allocator::record_to append their events to it;
/// thread-safe, and one recording may serve several devices.
class Recording {
 public:
  /// Creates (truncates) `path` and writes the header. Throws InvalidArgument naming the path when it cannot be
  /// written.
  static std::shared_ptr<Recording> open(const std::string& path, RecordingOptions options = {});
  ~Recording();
  Recording(const Recording&) = delete;
  Recording& operator=(const Recording&) = delete;

  /// A marker in the trace, e.g. "epoch 2". "step N begin"/"step N end" are step markers: use plimsoll::step().
  void marker(std::string_view text);
  /// Ends the open step (if any), names the call sites, writes the end record and closes the file. Further
  /// events are dropped. Called by the destructor if not before; throws InvalidArgument on a write error.
  void close();
  bool closed() const;

  const std::string& path() const;
  /// Events written so far (allocations, frees, maps, unmaps, OOMs, markers).
  std::uint64_t events() const;

  struct Impl;  // the writer, src/telemetry/recording/recorder.hpp

 private:
  explicit Recording(std::unique_ptr<Impl> impl);
  // Allocator::record_to attaches through this: the observer appends the device's events to `recording` (and
  // keeps it open). Names the device in the trace, so it takes the recording's lock: call it outside others.
  friend class Allocator;
  static std::shared_ptr<engine::AllocationObserver> observer_for(std::shared_ptr<Recording> recording,
                                                                  std::string_view device_name);
  std::unique_ptr<Impl> impl_;
};

/// Marks a training-step boundary in every open recording: ends step N (if one is open) and begins step N+1.
/// Steps are numbered from 1, process-wide. The leak watch and the timelines read these markers. Every device
/// hears it too (Allocator::step): step-aware placement lays later steps out from the ones it saw.
void step();
/// The number of the step step() last began (0 before the first call).
int current_step();

}  // namespace plimsoll
