#pragma once
// An asymmetric Dekker barrier: a hot side that runs all the time and a cold side that runs rarely. The hot side
// orders its store before its load with a compiler fence only; the cold side pays for both with Linux
// membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED), which runs a full memory barrier on every CPU running a thread of
// this process: after it returns, either the hot side's store is visible to the cold side, or the hot side's
// next load sees the cold side's store. Where membarrier cannot be registered (old kernel, seccomp) and under
// ThreadSanitizer (which does not model membarrier), both sides take a seq_cst fence instead: correct everywhere,
// one full fence on the hot side. docs/engine.md, "Threads", says why the per-thread caches use it.
#include <atomic>

namespace plimsoll::util {

class AsymmetricFence {
 public:
  /// Registers this process for expedited membarrier once; says whether the cheap hot side may be used.
  static bool asymmetric();
  /// "membarrier" or "seq_cst fence": which of the two runs in this process.
  static const char* kind() { return asymmetric() ? "membarrier" : "seq_cst fence"; }

  /// The hot side, between its store and its load. `asymmetric` is asymmetric()'s answer, read once by the caller.
  static void light(bool asymmetric) noexcept {
    if (asymmetric) [[likely]]
      std::atomic_signal_fence(std::memory_order_seq_cst);
    else
      std::atomic_thread_fence(std::memory_order_seq_cst);
  }
  /// The cold side, between its store and its load.
  static void heavy(bool asymmetric) noexcept;
};

}  // namespace plimsoll::util
