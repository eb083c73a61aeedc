#pragma once
// How a device's memory is budgeted: preallocate or grow, limits, the reserve, and giving memory back.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "plimsoll/device.hpp"

namespace plimsoll {

enum class Growth {
  preallocate,  // take the whole budget up front (TensorFlow's default); on cpu, address space only
  on_demand,    // grow as needed (TensorFlow's allow_growth)
};
std::string_view to_string(Growth growth);
Growth parse_growth(std::string_view text);  // "preallocate" | "on_demand"; throws InvalidArgument

/// A device's policy. Unset optionals take the device kind's defaults when the device is created.
struct Policy {
  Growth growth = Growth::on_demand;
  std::optional<std::uint64_t> memory_limit;     // bytes; at most one of limit and fraction
  std::optional<double> memory_fraction;         // share of the device's total memory, in (0, 1]
  std::optional<std::uint64_t> reserve;          // bytes never taken: CUDA context, cuBLAS/cuDNN workspaces
  std::optional<std::uint64_t> release_threshold;  // keep at most this many cached free bytes mapped
  std::optional<std::uint64_t> thread_cache;  // per-thread cache bytes (Allocator::set_thread_cache); 0: off.
                                              // Host and simulated devices; CUDA devices reuse by stream instead
  // A run plan file (plimsoll run-plan; Allocator::set_run_plan) loaded when the device is made: its requests go to
  // the plan's addresses from the first allocation until one does not match (docs/engine.md, "Run plans").
  std::optional<std::string> run_plan;

  /// Throws InvalidArgument with the reason when the combination cannot be used.
  void validate() const;
  friend bool operator==(const Policy&, const Policy&) = default;
};

/// The default reserve for a device kind, given its total bytes.
std::uint64_t default_reserve(DeviceKind kind, std::uint64_t total_bytes);

/// One logical device carved out of a physical one (TensorFlow's LogicalDeviceConfiguration): a fixed size, or an
/// equal share of what the physical device's budget leaves after its fixed-size siblings (the runtime works the
/// share out when the device is created; JSON: "equal", or a count such as `"logical_devices": 4`).
struct LogicalDeviceConfig {
  std::uint64_t memory_limit = 0;  // bytes; ignored when equal_share
  bool equal_share = false;

  static LogicalDeviceConfig sized(std::uint64_t bytes) { return LogicalDeviceConfig{bytes, false}; }
  static LogicalDeviceConfig equal() { return LogicalDeviceConfig{0, true}; }
  friend bool operator==(const LogicalDeviceConfig&, const LogicalDeviceConfig&) = default;
};

/// Everything a process configures. Sources, later ones overriding earlier ones: code, a JSON file
/// (PLIMSOLL_CONFIG or explicit), environment variables.
struct Config {
  Policy default_policy;
  std::map<std::string, Policy> device_policies;  // by device name, e.g. "cuda:0"
  std::map<std::string, std::vector<LogicalDeviceConfig>> logical_devices;  // physical device name -> split
  bool cpu_fallback = false;
  std::optional<std::string> visible_devices;  // PLIMSOLL_VISIBLE_DEVICES
  // PLIMSOLL_SHARE, "cuda:N=SHARE[:CAP][,...]" (docs/sharing.md): each named GPU's devices join its shared ledger
  // with that share. Unset: no ledger is touched.
  std::optional<std::string> gpu_shares;
  bool log_device_creation = true;

  Policy policy_for(const DeviceName& device) const;
};

/// Parses a JSON config document. `origin` names it in errors (a file path). Throws InvalidArgument.
///   {"policy": {"growth": "on_demand", "memory_limit": "8GiB", "memory_fraction": 0.5, "reserve": "512MiB",
///               "release_threshold": "1GiB", "run_plan": "job.plan"},
///    "devices": {"cuda:0": {"growth": "preallocate", "memory_fraction": 0.9,
///                            "logical_devices": ["4GiB", "4GiB"]}},   (or ["4GiB", "equal"], or 2: equal shares)
///    "cpu_fallback": true, "visible_devices": "0,1", "log_device_creation": false}
Config parse_config_json(std::string_view text, std::string_view origin = "config");
Config load_config_file(const std::string& path);

/// Reads one variable of this process's environment (std::getenv); nullptr when unset.
const char* process_environment(const char* name);

/// Applies environment variables on top of `base`; `getenv_fn` is injectable for tests.
///   PLIMSOLL_ALLOW_GROWTH=true|false, PLIMSOLL_MEMORY_LIMIT=SIZE, PLIMSOLL_MEMORY_FRACTION=F,
///   PLIMSOLL_RESERVE=SIZE, PLIMSOLL_RELEASE_THRESHOLD=SIZE, PLIMSOLL_CPU_FALLBACK=true|false,
///   PLIMSOLL_VISIBLE_DEVICES=LIST, PLIMSOLL_CONFIG=PATH (read first), PLIMSOLL_LOG=0|1,
///   PLIMSOLL_SHARE=cuda:N=SHARE[:CAP],... (gpu_shares), PLIMSOLL_RUN_PLAN=PATH (run_plan, every device's default)
using Getenv = const char* (*)(const char*);
Config apply_environment(Config base, Getenv getenv_fn = &process_environment);

}  // namespace plimsoll
