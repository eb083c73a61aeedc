#pragma once
// The policy behind libplimsoll_cuda_intercept.so: a process governed at the CUDA driver. The preload shell
// (src/integrations/cuda_intercept) turns each intercepted call into calls on this class; everything it decides
// (which GPU, its ledger, the charge, the answer to cuMemGetInfo, the context's cost, the one-time report) is here.
//
// Configured from PLIMSOLL_SHARE (`cuda:0=8GiB:16GiB[,cuda:1=...]`). Without it the process is not governed and
// every call goes straight to the driver. A GPU the variable does not name is refused every allocation (the job
// was given no share of it). A GPU whose ledger cannot be joined (corrupt file, shares full) is refused too, with
// the reason printed once: a budget that cannot be kept is not silently dropped.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "devices/cuda_driver.hpp"
#include "plimsoll/sharing.hpp"
#include "sharing/allocation_table.hpp"
#include "sharing/ledger.hpp"
#include "sharing/process_identity.hpp"

namespace plimsoll::sharing {

/// The real driver's entry points the governor calls (never the interposed ones).
struct DriverCalls {
  cuda_driver::Result (*ctx_get_device)(cuda_driver::Device* device) = nullptr;
  cuda_driver::Result (*device_get_uuid)(cuda_driver::Uuid* uuid, cuda_driver::Device device) = nullptr;
  cuda_driver::Result (*device_total_mem)(std::size_t* bytes, cuda_driver::Device device) = nullptr;
  cuda_driver::Result (*mem_get_info)(std::size_t* free_bytes, std::size_t* total_bytes) = nullptr;
};

/// "GPU-fafafafa-fafa-fafa-fafa-fafafafafafa", as nvidia-smi writes it.
std::string format_gpu_uuid(const cuda_driver::Uuid& uuid);

class DriverGovernor {
 public:
  /// `specs` empty: not governed.
  DriverGovernor(std::vector<ShareSpec> specs, DriverCalls driver, std::string ledger_dir);
  ~DriverGovernor();
  DriverGovernor(const DriverGovernor&) = delete;
  DriverGovernor& operator=(const DriverGovernor&) = delete;

  /// From PLIMSOLL_SHARE and PLIMSOLL_LEDGER_DIR. A PLIMSOLL_SHARE that does not parse governs every GPU with
  /// nothing allowed, the parse error printed at the first refusal.
  static std::unique_ptr<DriverGovernor> from_environment(DriverCalls driver);

  bool governed() const noexcept { return !specs_.empty() || !config_problem_.empty(); }

  /// The device of the calling thread's context, or nothing without one.
  std::optional<int> current_device() const;

  /// Before a driver allocation of `bytes` on `device`: kSuccess when charged, kErrorOutOfMemory when refused
  /// (the report printed once). `call` names the entry point for the report.
  cuda_driver::Result admit(int device, std::uint64_t bytes, const char* call);
  /// After the driver refused what admit() charged.
  void cancel(int device, std::uint64_t bytes) noexcept;
  /// After the driver allocated: remembers what `key` (an address or a handle) was charged.
  void remember(std::uint64_t key, int device, std::uint64_t bytes, bool is_handle);
  /// Before a free: takes `key`'s charge out of the table (nothing for an unknown key), so that an address the
  /// driver hands out again meanwhile (a stream-ordered pool reuses at once) is never confused with it. Then
  /// credit() it when the driver accepted the free, or remember() it again when it refused.
  std::optional<Charged> take(std::uint64_t key, bool is_handle) noexcept;
  void credit(const Charged& charged) noexcept { cancel(charged.device, charged.bytes); }

  /// Before the driver creates a context on `device` (the first time): waits (up to 30 s) for the GPU's context
  /// token, so that no other governed process creates one between this one's creation and its measurement.
  void context_creating(int device);
  /// Right after a context was created on `device` and made current: measures what it cost (once per GPU).
  void context_created(int device);
  /// After the creation, whether it succeeded or not: gives the token back.
  void context_done(int device) noexcept;

  /// cuMemGetInfo's answer for a governed device: total = the cap, free = what the process could be charged now
  /// (never more than the driver's free), by sharing::seen_under_share. Nothing for a device the process has no
  /// share of.
  std::optional<std::pair<std::size_t, std::size_t>> memory_info(int device, std::size_t driver_free);
  /// cuDeviceTotalMem's answer: the cap, or nothing as above.
  std::optional<std::size_t> total_memory(int device);

  /// fork(): takes the devices' mutex, then every allocation table's shards, and releases them on both sides after,
  /// so a child's first governed call (a new GPU ordinal) or free (a table's shard) does not wait for a thread that
  /// does not exist there. Only from the fork handlers of the CUDA intercept (governor_fork_participant.hpp), which
  /// take them after every engine lock: an engine's CUDA backing reaches the governor under its device's lock. The
  /// ledger's lock (a robust process-shared mutex, which join() takes under the devices' mutex) is left out on
  /// purpose, as for the engine (docs/engine.md, fork()).
  void lock_for_fork() noexcept;
  void unlock_after_fork() noexcept;
  /// True from when a fork()'s preparation asks for these locks until they are released after it (a seam for tests).
  bool fork_locking() const noexcept { return fork_locking_.load(std::memory_order_acquire); }

 private:
  struct Device;
  Device* device(int ordinal);  // made on first use; nullptr for an ordinal out of range
  void join(Device& d);          // joins its ledger, or records why it cannot
  void report_once(const std::string& text);

  std::vector<ShareSpec> specs_;
  DriverCalls driver_;
  std::string ledger_dir_;
  static constexpr int kMaxDevices = 64;
  std::mutex devices_mutex_;                       // held while a device joins its ledger
  std::vector<std::unique_ptr<Device>> devices_;   // owns them
  std::atomic<Device*> by_ordinal_[kMaxDevices] = {};  // the lock-free lookup every call makes
  AllocationTable addresses_;
  AllocationTable handles_;
  std::atomic<bool> reported_{false};
  std::atomic<bool> fork_locking_{false};
  std::string config_problem_;  // PLIMSOLL_SHARE did not parse
  std::chrono::milliseconds trim_wait_;
  ProcessIdentity me_;  // read once: getenv on every allocation would cost more than the rest
};

}  // namespace plimsoll::sharing
