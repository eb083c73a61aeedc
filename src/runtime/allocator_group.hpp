#pragma once
// The allocators of one GPU (its logical devices, or the one physical device), seen by the GPU's shared ledger as one
// process: a trim, a pause or a resume asked by the ledger applies to all of them, and their in-use bytes add up.
#include <mutex>
#include <vector>

#include "engine/outer_fork_lock.hpp"
#include "plimsoll/allocator.hpp"
#include "plimsoll/sharing.hpp"

namespace plimsoll::runtime {

class AllocatorGroup {
 public:
  /// `lock`: the group's lock, an outer fork lock (docs/engine.md "fork()") its owner registered already and keeps
  /// registered while the group lives. The group never registers one itself: a group is made and destroyed under
  /// the runtime's lock, and registering under an outer lock deadlocks a concurrent fork (fork_handlers.hpp).
  explicit AllocatorGroup(engine::OuterForkLock& lock) : mutex_(lock) {}
  AllocatorGroup(const AllocatorGroup&) = delete;
  AllocatorGroup& operator=(const AllocatorGroup&) = delete;

  /// `allocator` must outlive the group's hooks (the runtime stops its responder before destroying allocators).
  void add(Allocator& allocator);

  /// For a TrimResponder (the group must outlive it): trim, in_use, pause, resume and paused over every member.
  /// A pause pauses every member not paused yet, all or nothing (a member that fails resumes the ones it paused);
  /// a resume resumes every paused member and stops at the first that fails (that one stays paused with nothing
  /// lost; the next resume takes up the rest).
  ShareHooks hooks();

 private:
  void trim();
  std::uint64_t in_use();
  std::uint64_t pause(bool keep_contents);
  void resume();
  std::optional<std::uint64_t> paused();

  // Held while a hook runs: a device created meanwhile joins before or after it, never during. Held across fork() as
  // an outer lock (before every engine lock): a hook takes device locks under it (trim, pause), and add() runs under
  // the runtime's lock when a child makes its first device of a GPU, which would hang on a copy that the ledger's
  // responder thread held at the fork. The runtime's one group lock (every GPU's group shares it: hooks are rare),
  // registered in Runtime's constructor right after the runtime's lock, in the order add() nests them.
  engine::OuterForkLock& mutex_;
  std::vector<Allocator*> members_;
};

}  // namespace plimsoll::runtime
