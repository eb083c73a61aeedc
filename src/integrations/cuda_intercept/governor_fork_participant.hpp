#pragma once
// The CUDA intercept's governor beside fork(): its locks (a GPU's first use, the allocation tables' shards) taken by
// the engine's fork handlers as a participant's members (engine/fork_handlers.hpp, step 5), so a child of a governed
// job neither waits for a devices' mutex nor a shard a thread of the parent held at the fork. The intercept registers
// it when the preload library loads, before the job can load an engine of its own: pthread_atfork runs preparations
// in the reverse order of registration, so the governor's leaf locks are taken after every lock of the job's engine
// (whose CUDA backings reach the governor under their device locks), and released before them.
#include <atomic>

#include "engine/fork_handlers.hpp"
#include "sharing/driver_governor.hpp"

namespace plimsoll::cuda_intercept {

class GovernorForkParticipant final : public engine::ForkParticipant {
 public:
  /// The governor made (lazily, at the first intercepted call); until then a fork has nothing to take.
  void watch(sharing::DriverGovernor& governor) noexcept { governor_.store(&governor, std::memory_order_release); }
  /// Before the governor watched is destroyed (the intercept's never is; a test's is).
  void watch_nothing() noexcept { governor_.store(nullptr, std::memory_order_release); }

  void lock_registry_for_fork() noexcept override {}
  void lock_members_for_fork() noexcept override {
    held_ = governor_.load(std::memory_order_acquire);
    if (held_ != nullptr) held_->lock_for_fork();
  }
  void unlock_after_fork() noexcept override {
    if (held_ != nullptr) held_->unlock_after_fork();
    held_ = nullptr;
  }

 private:
  std::atomic<sharing::DriverGovernor*> governor_{nullptr};
  sharing::DriverGovernor* held_ = nullptr;  // only the forking thread, between the handlers
};

}  // namespace plimsoll::cuda_intercept
