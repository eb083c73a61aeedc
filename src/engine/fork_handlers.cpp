#include "engine/fork_handlers.hpp"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <vector>

#include "backings/backing.hpp"
#include "engine/step_listeners.hpp"
#include "engine/tag_table.hpp"
#include "engine/thread_cache.hpp"

namespace plimsoll::engine {

namespace {

// The live devices' locks and backings, in the order the devices were made. Never destroyed: a fork during static
// destruction still finds it. The vector only grows at a registration (never inside the handlers, which allocate
// nothing).
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

// The outer locks (step 0), in the order they registered. Never destroyed, like the devices' registry.
struct OuterLocks {
  std::mutex mutex;
  std::vector<OuterForkLock*> locks;
};
OuterLocks& outer_locks() {
  static auto* const registry = new OuterLocks;
  return *registry;
}

// Participants, in the order they registered. Never destroyed, like the devices' registry.
struct Participants {
  std::mutex mutex;
  std::vector<ForkParticipant*> list;
};
Participants& participants() {
  static auto* const registry = new Participants;
  return *registry;
}

std::atomic<bool> preparing{false}, locking_backings{false}, locking_members{false}, locking_tags{false};

void lock_outer() PLIMSOLL_NO_THREAD_SAFETY_ANALYSIS {
  OuterLocks& registry = outer_locks();
  registry.mutex.lock();
  for (OuterForkLock* lock : registry.locks) lock->lock_for_fork();
}

void unlock_outer() PLIMSOLL_NO_THREAD_SAFETY_ANALYSIS {
  OuterLocks& registry = outer_locks();
  for (auto lock = registry.locks.rbegin(); lock != registry.locks.rend(); ++lock) (*lock)->unlock_after_fork();
  registry.mutex.unlock();
}

void lock_participant_registries() PLIMSOLL_NO_THREAD_SAFETY_ANALYSIS {
  Participants& registry = participants();
  registry.mutex.lock();
  for (ForkParticipant* participant : registry.list) participant->lock_registry_for_fork();
}

void lock_participant_members() {
  locking_members.store(true, std::memory_order_release);
  for (ForkParticipant* participant : participants().list) participant->lock_members_for_fork();
}

void unlock_participants() PLIMSOLL_NO_THREAD_SAFETY_ANALYSIS {
  Participants& registry = participants();
  for (auto participant = registry.list.rbegin(); participant != registry.list.rend(); ++participant)
    (*participant)->unlock_after_fork();
  locking_members.store(false, std::memory_order_release);
  registry.mutex.unlock();
}

void lock_devices() PLIMSOLL_NO_THREAD_SAFETY_ANALYSIS {
  DeviceLocks& registry = device_locks();
  registry.mutex.lock();
  // Every device lock before any backing's: logical devices share one backing, and a thread holding a later
  // device's lock waits inside map() for the shared backing's lock. Then every device backing's own lock before
  // any upstream's: a view's host_pages() (no device lock) holds the view's lock while it waits for the shared one.
  for (const DeviceLock& device : registry.locks) device.lock->lock();
  locking_backings.store(true, std::memory_order_release);
  for (const DeviceLock& device : registry.locks)
    if (device.backing != nullptr) device.backing->lock_self_for_fork();
  for (const DeviceLock& device : registry.locks)
    if (device.backing != nullptr) device.backing->lock_rest_for_fork();
}

void unlock_devices() PLIMSOLL_NO_THREAD_SAFETY_ANALYSIS {
  DeviceLocks& registry = device_locks();
  for (auto device = registry.locks.rbegin(); device != registry.locks.rend(); ++device)
    if (device->backing != nullptr) device->backing->unlock_after_fork();
  locking_backings.store(false, std::memory_order_release);
  for (auto device = registry.locks.rbegin(); device != registry.locks.rend(); ++device) device->lock->unlock();
  registry.mutex.unlock();
}

void prepare() {
  preparing.store(true, std::memory_order_release);
  // The outer locks before all: a runtime makes devices under its lock (registering their locks, joining the step
  // listeners), so taken later they would wait for a thread that waits for the preparation.
  lock_outer();
  // Then the step mutex: announce_step holds it across every device's step() (a pack: up to a second), and a
  // front stopped while the preparation waits for it would stall its threads that long. Nothing takes it under a
  // front's or a device's lock.
  lock_step_listeners_for_fork();
  lock_participant_registries();
  ThreadCaches::prepare_fork();
  lock_devices();
  lock_participant_members();
  // A leaf: intern_tag and tag_name take nothing under it, and are called under a device's or a recording's lock.
  locking_tags.store(true, std::memory_order_release);
  lock_tag_table_for_fork();
}

void unlock_tags() {
  unlock_tag_table_after_fork();
  locking_tags.store(false, std::memory_order_release);
}

void parent() {
  unlock_tags();
  unlock_devices();
  ThreadCaches::parent_after_fork();
  unlock_participants();
  unlock_step_listeners_after_fork();
  unlock_outer();
  preparing.store(false, std::memory_order_release);
}

void child() {
  unlock_tags();
  unlock_devices();
  ThreadCaches::child_after_fork();
  unlock_participants();
  unlock_step_listeners_after_fork();
  unlock_outer();
  preparing.store(false, std::memory_order_release);
}

}  // namespace

void install_fork_handlers() {
  static std::once_flag installed;
  std::call_once(installed, [] {
    // Every registry the handlers walk is made here: made at its first use inside fork(), it would allocate there.
    ThreadCaches::make_fork_list();
    make_step_listeners_for_fork();
    make_tag_table_for_fork();
    (void)device_locks();
    (void)participants();
    (void)outer_locks();
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

void register_outer_fork_lock(OuterForkLock& lock) {
  install_fork_handlers();
  OuterLocks& registry = outer_locks();
  const std::lock_guard guard(registry.mutex);
  registry.locks.push_back(&lock);
}

void unregister_outer_fork_lock(OuterForkLock& lock) {
  OuterLocks& registry = outer_locks();
  const std::lock_guard guard(registry.mutex);
  std::erase(registry.locks, &lock);
}

void register_fork_participant(ForkParticipant& participant) {
  install_fork_handlers();
  Participants& registry = participants();
  const std::lock_guard guard(registry.mutex);
  registry.list.push_back(&participant);
}

bool fork_locking_participant_members() noexcept { return locking_members.load(std::memory_order_acquire); }

bool fork_locking_backings() noexcept { return locking_backings.load(std::memory_order_acquire); }

bool fork_locking_tag_table() noexcept { return locking_tags.load(std::memory_order_acquire); }

bool fork_preparing() noexcept { return preparing.load(std::memory_order_acquire); }

}  // namespace plimsoll::engine
