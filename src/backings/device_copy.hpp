#pragma once
// Copying a device's mapped memory to the host and back: what pausing a device with its contents kept needs
// (docs/engine.md, "Pause and resume"). The engine asks its backing for one (Backing::device_copy); a backing whose
// memory the process can touch (host) gets the plain one here, a GPU backing copies through its driver, and the
// simulated device, which has no contents, has none.
#include <cstdint>
#include <string>

namespace plimsoll::backings {

class DeviceCopy {
 public:
  virtual ~DeviceCopy() = default;

  /// Host memory for `bytes` of contents while the device is paused (pinned where the driver has it, so that the
  /// copies run as DMA); nullptr when the host cannot give it.
  virtual void* allocate_host(std::uint64_t bytes) noexcept = 0;
  virtual void free_host(void* host, std::uint64_t bytes) noexcept = 0;
  /// Copies `bytes` of mapped memory at `device` to `host`, once the work queued on the device has finished.
  /// Returns an empty string, or what failed.
  virtual std::string to_host(void* host, std::uintptr_t device, std::uint64_t bytes) = 0;
  /// Copies `bytes` from `host` back to mapped memory at `device`. Returns an empty string, or what failed.
  virtual std::string to_device(std::uintptr_t device, const void* host, std::uint64_t bytes) = 0;
};

/// For memory this process reads and writes directly (Backing::touchable()): heap memory and memcpy.
DeviceCopy& touchable_memory_copy() noexcept;

}  // namespace plimsoll::backings
