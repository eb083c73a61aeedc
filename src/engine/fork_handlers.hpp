#pragma once
// fork() beside the engine's locks. Only the forking thread lives on in the child: a lock another thread held at
// the fork is never released there, so the child's next operation on it hangs. One pthread_atfork handler set,
// installed once, therefore takes every engine lock a device operation needs before the fork and releases it on
// both sides after, in the engine's one lock order (docs/engine.md, "Threads", fork()):
//   0. the outer locks' registry, then every outer lock (a layer above whose lock is held while it makes devices,
//      configures them and listens for steps: the runtime's mutex, which Runtime::device takes at a child's first
//      allocation through the runtime; a GPU's AllocatorGroup, IdleRelease's, which take device locks under them);
//      nothing takes one under any lock below. One the forking thread holds (a driver library forking under
//      Runtime::device's scan) is left to it: it keeps it in the child too;
//   1. the step listeners' registry (engine/step_listeners.hpp), which announce_step holds while it takes device
//      locks (across a pack: up to a second); nothing takes it under a front's or a device's lock, and taken first
//      it stalls no front thread while the preparation waits for it;
//   2. every fork participant's registry (a layer above the engine with locks of its own: telemetry's open
//      recordings), which nothing takes under a front's or a device's lock;
//   3. every per-thread cache front (ThreadCaches::prepare_fork: each cache's lock with its owner stopped, the
//      depot, the registry); a cache's owner may wait for the device lock inside its operation, so the fronts come
//      before any device lock;
//   4. the registry of live devices below, then every device's own lock, in the order the devices were made (no
//      thread holds two device locks at once, so any fixed order is safe); then every device backing's lock, then
//      each one's upstream's (an adaptor's) and its own leaf locks (Backing::do_lock_own_for_fork): map() nests
//      them under the device lock, host_pages() takes the backing's alone, and logical devices' views share one
//      upstream, which a thread under another device's lock may wait for. A backing reached twice (shared) is
//      locked once (Backing counts);
//   5. every fork participant's members (each open recording's lock, taken under a device lock by every observed
//      event; the CUDA intercept's governor's leaves, in the intercept's own copy of these handlers);
//   6. the tag table's mutex (engine/tag_table.hpp), a leaf that intern_tag and tag_name take under a device's or
//      a recording's lock or alone.
// After the fork, both sides: the tag table, the devices' locks and their registry, the fronts (in the child, lowering every held
// owner's operation flag: only the forking thread exists there), the participants, the step registry, then the
// outer locks and their registry. A
// device joins the registry at its construction and leaves it first thing in its destruction; the preparation
// holds the registry's mutex until the handlers after the fork ran, so a device destroyed meanwhile waits, and a
// device that left is never touched.
#include <mutex>

#include "engine/outer_fork_lock.hpp"
#include "util/spin_lock.hpp"

namespace plimsoll::backings {
class Backing;
}

namespace plimsoll::engine {

/// Installs the handlers (once per process; later calls do nothing). Called before any lock the handlers take can
/// be held: at a device's construction and at a front's first cache.
void install_fork_handlers();

/// A device's lock, taken around every fork() from registration until unregistration, and right after it its
/// backing's (Backing::lock_for_fork; nullptr: none). Not called with either held.
void register_device_lock(util::SpinLock& lock, backings::Backing* backing = nullptr);
void unregister_device_lock(util::SpinLock& lock);

/// A lock of a layer above the engine, taken first of all around every fork() (step 0) from registration until
/// unregistration: a lock held while devices are made or configured (so while their locks are registered, the step
/// listeners joined, device locks taken), never taken under an engine lock. Not called with it held. A thread that
/// forks while holding it keeps it (OuterForkLock records its owner): the preparation does not take it again.
/// Rule: never register or unregister an outer lock while holding one. The fork's preparation holds the registry and
/// then waits for each outer lock; a thread holding an outer lock and waiting for the registry deadlocks it (ABBA).
/// So an object made or destroyed under an outer lock (a runtime's AllocatorGroup) is handed a lock its owner
/// registered beforehand, and never registers its own.
void register_outer_fork_lock(OuterForkLock& lock);
void unregister_outer_fork_lock(OuterForkLock& lock);

/// A layer above the engine whose locks a fork() must hold too (telemetry's recordings: the engine cannot include
/// them). Its hooks run inside fork(): they allocate nothing and throw nothing.
class ForkParticipant {
 public:
  /// Before the fronts: a registry nothing takes under a front's or a device's lock.
  virtual void lock_registry_for_fork() noexcept = 0;
  /// After every device's lock: locks taken under a device lock.
  virtual void lock_members_for_fork() noexcept = 0;
  /// Both sides after the fork: the members' locks, then the registry.
  virtual void unlock_after_fork() noexcept = 0;

 protected:
  ~ForkParticipant() = default;
};

/// From now until the process ends (a participant is never unregistered: make it a static that lives as long).
void register_fork_participant(ForkParticipant& participant);

/// True from when a fork()'s preparation starts taking the participants' members (step 5) until its handlers after
/// the fork ran. A seam for tests: a thread blocked holding a member's lock is released once the preparation waits
/// for it.
bool fork_locking_participant_members() noexcept;

/// True from when a fork()'s preparation, holding every device lock, starts taking the devices' backings' locks
/// until its handlers after the fork ran. A seam for tests: a thread parked holding a backing's lock (no device
/// lock) is released once the preparation waits for it.
bool fork_locking_backings() noexcept;

/// True from when a fork()'s preparation starts taking the tag table's mutex (step 6) until its handlers after the
/// fork released it. A seam for tests: a thread parked inside intern_tag is released once the preparation asks.
bool fork_locking_tag_table() noexcept;

/// True from the start of a fork()'s preparation until its handlers after the fork have run. A seam for tests: a
/// thread that holds a device lock, parked inside a backing call, polls it to let the preparation take the lock.
bool fork_preparing() noexcept;

}  // namespace plimsoll::engine
