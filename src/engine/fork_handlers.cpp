#include "engine/fork_handlers.hpp"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <vector>

#include "backings/backing.hpp"
#include "engine/step_listeners.hpp"
#include "engine/thread_cache.hpp"

namespace plimsoll::engine {

namespace {

// The live devices' locks and backings, in the order the devices were made. Never destroyed: a fork during static destruction
// still finds it. The vector only grows at a registration (never inside the handlers, which allocate nothing).
struct DeviceLock {
  util::SpinLock* lock;
  backings::Backing* backing;  // nullptr: none
};
struct DeviceLocks {
  std::mutex mutex;
  std::vector<DeviceLock> locks;
};
DeviceLocks& device_locks() {
  static auto* const registry = new DeviceLocks;
  return *registry;
}

std::atomic<bool> preparing{false};

void lock_devices() PLIMSOLL_NO_THREAD_SAFETY_ANALYSIS {
  DeviceLocks& registry = device_locks();
  registry.mutex.lock();
  for (const DeviceLock& device : registry.locks) {
    device.lock->lock();
    if (device.backing != nullptr) device.backing->lock_for_fork();
  }
}

void unlock_devices() PLIMSOLL_NO_THREAD_SAFETY_ANALYSIS {
  DeviceLocks& registry = device_locks();
  for (auto device = registry.locks.rbegin(); device != registry.locks.rend(); ++device) {
    if (device->backing != nullptr) device->backing->unlock_after_fork();
    device->lock->unlock();
  }
  registry.mutex.unlock();
}

void prepare() {
  preparing.store(true, std::memory_order_release);
  // The step mutex first: announce_step holds it across every device's step() (a pack: up to a second), and a
  // front stopped while the preparation waits for it would stall its threads that long. Nothing takes it under a
  // front's or a device's lock.
  lock_step_listeners_for_fork();
  ThreadCaches::prepare_fork();
  lock_devices();
}

void parent() {
  unlock_devices();
  ThreadCaches::parent_after_fork();
  unlock_step_listeners_after_fork();
  preparing.store(false, std::memory_order_release);
}

void child() {
  unlock_devices();
  ThreadCaches::child_after_fork();
  unlock_step_listeners_after_fork();
  preparing.store(false, std::memory_order_release);
}

}  // namespace

void install_fork_handlers() {
  static std::once_flag installed;
  std::call_once(installed, [] {
    // Every registry the handlers walk is made here: made at its first use inside fork(), it would allocate there.
    ThreadCaches::make_fork_list();
    make_step_listeners_for_fork();
    (void)device_locks();
    pthread_atfork(&prepare, &parent, &child);
  });
}

void register_device_lock(util::SpinLock& lock, backings::Backing* backing) {
  install_fork_handlers();
  DeviceLocks& registry = device_locks();
  const std::lock_guard guard(registry.mutex);
  registry.locks.push_back(DeviceLock{&lock, backing});
}

void unregister_device_lock(util::SpinLock& lock) {
  DeviceLocks& registry = device_locks();
  const std::lock_guard guard(registry.mutex);
  std::erase_if(registry.locks, [&lock](const DeviceLock& device) { return device.lock == &lock; });
}

bool fork_preparing() noexcept { return preparing.load(std::memory_order_acquire); }

}  // namespace plimsoll::engine
