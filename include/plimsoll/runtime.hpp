#pragma once
// The process's devices: creates each device's Allocator on first use, from the Config.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "plimsoll/allocator.hpp"
#include "plimsoll/device.hpp"
#include "plimsoll/policy.hpp"

namespace plimsoll {

namespace runtime {
struct RuntimeAccess;  // the test seam for a CUDA driver (src/runtime/runtime_access.hpp)
}

/// A line for `plimsoll devices`: one physical or logical device.
struct DeviceListing {
  std::string name;
  std::string hardware;
  std::uint64_t total_bytes = 0;
  std::uint64_t free_bytes = 0;
  std::uint64_t limit_bytes = 0;   // what its policy would allow
  Policy policy;
  std::string details;             // UUID, PCI bus id, compute capability; cgroup limit for the host
};

class Runtime {
 public:
  /// The config as given (no environment applied: use apply_environment for that).
  explicit Runtime(Config config);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  /// The process-wide runtime, configured from the environment on first use.
  static Runtime& global();

  /// Creates the device on first use (logging one "Created device" line unless disabled).
  /// Unknown cuda:N: DeviceUnavailable, or with cpu_fallback the cpu device plus a one-line notice.
  Allocator& device(std::string_view name);
  Allocator& device(const DeviceName& name);

  /// Every visible device (GPUs, host, configured logical devices), without creating any.
  std::vector<DeviceListing> list_devices() const;
  /// Why GPUs are or are not visible (CUDA_VISIBLE_DEVICES, PLIMSOLL_VISIBLE_DEVICES, driver).
  std::vector<std::string> visibility_report() const;
  /// Not synchronized with configure() or replace_config(): read it while no other thread changes the config.
  const Config& config() const noexcept;

  /// Sets one device's policy ("cuda:0", "cpu/1"), for plimsoll_configure. A device not created yet gets it when
  /// created; a created one gets the limits it comes to through
  /// Allocator::set_limits (InvalidState after its first allocation).
  void configure(std::string_view device, const Policy& policy);
  /// The policy `device` gets from the config, before defaults are filled in (a copy, taken under the lock).
  Policy policy_for(std::string_view device) const;
  /// Replaces the whole config (plimsoll_load_config). Throws InvalidState once any device was created.
  void replace_config(Config config);

  /// For tests: replace what the hardware reports. GPUs listed this way have no driver behind them: they are
  /// listed, and creating one throws DeviceUnavailable (tests with a fake driver use RuntimeAccess).
  void inject_hardware(GpuScan gpus, HostInfo host);

 private:
  friend struct runtime::RuntimeAccess;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace plimsoll
