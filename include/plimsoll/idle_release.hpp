#pragma once
// Giving idle host memory back to the kernel without losing the fast path of repeating steps (docs/engine.md,
// "Returning idle memory").
//
// A device keeps freed memory mapped (its cache), so the next step reuses it without mapping and faulting pages in
// again: that is most of plimsoll's gain over glibc on training steps. A release threshold alone cannot tell a
// step's working set, freed and needed again a moment later, from a 1 GiB tensor deleted for good. Time can: while
// the program allocates and frees, its cache is in use; when a device has seen no allocation or free for
// `idle_after`, whatever it caches is returned (Allocator::trim), and the next allocation maps afresh.
//
//   plimsoll::IdleRelease release({&runtime.device("cpu")});   // host default: idle for 1 s, checked every 100 ms
//   ... del a big tensor; a second later the process is that much smaller ...
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

namespace plimsoll {

class Allocator;

struct IdleReleaseOptions {
  /// A device with no allocation or free for this long gives back its cached memory.
  std::chrono::milliseconds idle_after{1000};
  /// How often the background thread looks (one Allocator::stats() per device and look).
  std::chrono::milliseconds check_every{100};
  /// Cached bytes (reserved minus in use) a device may keep even when idle: below this, nothing is released.
  std::uint64_t keep_cached_bytes = 0;

  /// Throws InvalidArgument when a duration is not positive or check_every is longer than idle_after.
  void validate() const;
};

/// The default for host devices of Python jobs (`plimsoll run`, `import plimsoll`): idle release after 1 s,
/// checked every 100 ms, nothing kept. Measured in docs/engine.md: no map or unmap per step in a replay of the
/// shared traces (the same as keeping everything cached), and the RSS of a freed 1 GiB block back within 1.1 s.
IdleReleaseOptions host_idle_release_defaults();

/// Watches devices and returns the cached memory of those that went idle. poll() is the whole logic, with the
/// time passed in (tests drive it); start() runs it on a background thread every check_every until the object is
/// destroyed or stop() is called. Devices must outlive the object. Thread-safe. Its lock is held across fork() (the
/// engine's fork handlers, as an outer lock: poll() takes device locks under it), so a child can poll, watch and read
/// it; the background thread does not exist in a child (start() there runs one of its own).
class IdleRelease {
 public:
  explicit IdleRelease(std::vector<Allocator*> devices = {}, IdleReleaseOptions options = host_idle_release_defaults());
  ~IdleRelease();
  IdleRelease(const IdleRelease&) = delete;
  IdleRelease& operator=(const IdleRelease&) = delete;

  /// Watches one more device (a device created after the object).
  void watch(Allocator& device);
  /// One look at every device as of `now`: trims each that has cached bytes above keep_cached_bytes and has seen no
  /// allocation or free since `idle_after` before `now`. Returns the bytes given back.
  std::uint64_t poll(std::chrono::steady_clock::time_point now);

  /// Starts the background thread (once; later calls do nothing).
  void start();
  /// Stops and joins it; the destructor does too.
  void stop();

  /// Bytes given back and trims done so far.
  std::uint64_t released_bytes() const;
  std::uint64_t releases() const;

 private:
  struct State;  // the lock (registered with the engine's fork handlers), the devices, the thread
  IdleReleaseOptions options_;
  std::unique_ptr<State> state_;
};

}  // namespace plimsoll
