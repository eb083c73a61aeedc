#pragma once
// Devices: names ("cpu", "cuda:1", "sim:16GiB"), what the hardware reports, and which GPUs are visible.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace plimsoll {

enum class DeviceKind { cpu, cuda, sim };

/// A device as a user names it. `cuda:N` counts among the devices CUDA shows (after CUDA_VISIBLE_DEVICES),
/// like torch's `cuda:N`. `sim:SIZE` is a simulated device of SIZE bytes: synthetic addresses, nothing touched.
/// `cpu-pinned` is host memory page-locked through the CUDA driver (staging buffers for copies to a GPU).
/// A suffix `/K` names logical device K carved out of that physical device: `cpu/1`, `cuda:0/0`, `sim:8GiB/1`.
struct DeviceName {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;                 // cuda only
  std::uint64_t sim_bytes = 0;   // sim only
  int logical = -1;              // -1: the physical device itself
  bool pinned = false;           // cpu only: `cpu-pinned`, page-locked host memory (docs/cuda.md, "Pinned host memory")

  DeviceName physical() const { DeviceName p = *this; p.logical = -1; return p; }

  /// Throws InvalidArgument naming the accepted forms.
  static DeviceName parse(std::string_view text);
  std::string str() const;
  friend bool operator==(const DeviceName&, const DeviceName&) = default;
};

/// One CUDA GPU as the driver reports it.
struct GpuInfo {
  int ordinal = 0;  // index among the devices CUDA shows
  std::string name;
  std::uint64_t total_bytes = 0;
  std::uint64_t free_bytes = 0;
  std::string uuid;        // "GPU-xxxxxxxx-xxxx-..."
  std::string pci_bus_id;  // "0000:17:00.0"
  int compute_major = 0;
  int compute_minor = 0;
};

/// The host's memory. The cgroup v2 limit, when set, is the real ceiling of this process.
struct HostInfo {
  std::uint64_t total_ram_bytes = 0;
  std::uint64_t available_ram_bytes = 0;
  std::optional<std::uint64_t> cgroup_limit_bytes;  // memory.max, absent when "max" or no cgroup v2
  std::uint64_t limit_bytes() const;                 // the smaller of the two
};

/// What the CUDA driver said when asked for GPUs.
struct GpuScan {
  std::vector<GpuInfo> gpus;
  std::string unavailable_reason;  // empty when the driver answered; else why no GPU can be used
};

/// Queries the CUDA driver (loaded at run time: a machine without one gets a reason, never a crash).
GpuScan scan_gpus();
HostInfo scan_host();
/// Host info read from explicit files (for tests): /proc/meminfo text and the cgroup memory.max text.
HostInfo parse_host_info(std::string_view meminfo, std::optional<std::string_view> cgroup_memory_max);

/// The explanation of a visible-device list (CUDA_VISIBLE_DEVICES or PLIMSOLL_VISIBLE_DEVICES) applied to a list
/// of devices. CUDA's grammar: comma-separated entries, each an index, a UUID prefix ("GPU-8932f937") or a MIG
/// instance ("MIG-..."); the list stops at the first entry that is invalid or names no device, and naming a
/// device twice empties it (what the driver does: see src/devices/visibility.cpp).
struct Visibility {
  struct Entry {
    std::string text;
    bool used = false;
    std::string why;  // "GPU 2" or why the list stopped here
  };
  bool set = false;              // the variable was present
  std::vector<int> selected;     // indices into the input list, in the order given
  std::vector<Entry> entries;
  std::string summary() const;   // one line for `plimsoll devices`
};

/// Applies the grammar to `devices` (identified by their UUIDs). `value` absent means the variable is unset.
Visibility resolve_visibility(std::optional<std::string_view> value, const std::vector<std::string>& device_uuids);

}  // namespace plimsoll
