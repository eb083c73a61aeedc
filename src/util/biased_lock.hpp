#pragma once
// A lock biased toward one thread: the device lock, which a training job's main thread takes for nearly every
// request the per-thread caches do not serve (docs/engine.md, "Threads").
//
// The *owner* (the thread that took the lock kFirstBias times in a row, fixed for the lock's life) enters with plain
// stores, the hot side of util::AsymmetricFence: it raises its `owner_inside` flag, runs a compiler fence, and reads
// `biased`; no atomic read-modify-write (a spin lock's exchange waits for the stores before it to drain). Every other
// thread takes the inner spin lock; if the bias is on, it turns it off (`biased` false), runs the cold side of the
// fence (membarrier: every CPU running a thread of this process passes a full barrier) and waits for the owner's flag
// to drop. Dekker's argument, made asymmetric: after the barrier either the revoker sees the owner's flag (and waits
// for its release store) or the owner's read sees the bias off (it lowers its flag and takes the inner lock too). So
// at most one thread is inside: the owner by its flag or a holder of the inner lock, never both.
//
// A revocation costs the revoker a system call of a few microseconds, so it must be rare: the bias comes back only
// when the owner again takes the (inner) lock `rebias_after` times in a row, and every revocation doubles that, up to
// kMaxRebias: a thread that frees now and then (autograd's) pays for at most a few revocations, then the owner takes
// the inner lock like everyone else. The owner is fixed once chosen, so its flag is written by one thread only (a
// flag handed from thread to thread could be lowered by a former owner's late store).
//
// Seams: hooks at the two points where the protocol's interleavings matter, for tests that park threads there
// (tests/threads_biased_lock_test.cpp); the device lock uses NoBiasSeams, which compiles to nothing.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>

#include "util/asymmetric_fence.hpp"
#include "util/spin_lock.hpp"
#include "util/thread_annotations.hpp"

namespace plimsoll::util {

struct NoBiasSeams {
  static void owner_announced() noexcept {}  // the owner raised its flag and has not read the bias yet
  static void revoker_waiting() noexcept {}  // a revoker turned the bias off, fenced, and waits for the owner
};

namespace detail {
inline constinit thread_local std::uint64_t t_thread_token = 0;
std::uint64_t assign_thread_token() noexcept;
}  // namespace detail

/// A number for the calling thread, never reused in the process (so an exited owner's number cannot come back with
/// another thread); one thread-local read after the first call.
inline std::uint64_t this_thread_token() noexcept {
  const std::uint64_t token = detail::t_thread_token;
  return token != 0 ? token : detail::assign_thread_token();
}

template <class Seams = NoBiasSeams>
class PLIMSOLL_CAPABILITY("biased lock") BasicBiasedLock {
 public:
  static constexpr std::uint32_t kFirstBias = 256;        // inner-lock entries in a row that make a thread the owner
  static constexpr std::uint32_t kMaxRebias = 1u << 20;  // entries in a row the bias waits for after many revocations

  BasicBiasedLock() : asymmetric_(AsymmetricFence::asymmetric()) {}
  BasicBiasedLock(const BasicBiasedLock&) = delete;
  BasicBiasedLock& operator=(const BasicBiasedLock&) = delete;

  [[gnu::always_inline]] void lock() noexcept PLIMSOLL_ACQUIRE() {
    if (owner_.load(std::memory_order_relaxed) == this_thread_token()) [[likely]] {
      owner_inside_.store(true, std::memory_order_relaxed);
      Seams::owner_announced();
      AsymmetricFence::light(asymmetric_);
      if (biased_.load(std::memory_order_acquire)) [[likely]] {
        by_owner_ = true;
        return;
      }
      owner_inside_.store(false, std::memory_order_release);  // revoked: the inner lock, as every other thread
    }
    lock_inner();
  }

  [[gnu::always_inline]] void unlock() noexcept PLIMSOLL_RELEASE() {
    if (by_owner_) {
      by_owner_ = false;
      owner_inside_.store(false, std::memory_order_release);
      return;
    }
    inner_.unlock();
  }

  /// Whether the bias is on (for tests and figures; a snapshot).
  bool biased() const noexcept { return biased_.load(std::memory_order_relaxed); }
  /// The owner's token (this_thread_token()), 0 before one is chosen.
  std::uint64_t owner() const noexcept { return owner_.load(std::memory_order_relaxed); }
  /// How many times other threads turned the bias off (read by the lock's holder, or after the threads joined).
  std::uint64_t revocations() const noexcept { return revocations_; }

 private:
  [[gnu::noinline]] void lock_inner() noexcept {
    inner_.lock();
    const std::uint64_t me = this_thread_token();
    if (biased_.load(std::memory_order_relaxed)) {  // changed only under inner_
      biased_.store(false, std::memory_order_relaxed);
      AsymmetricFence::heavy(asymmetric_);
      Seams::revoker_waiting();
      for (unsigned spins = 0; owner_inside_.load(std::memory_order_acquire); ++spins) {
        if (spins > 64) std::this_thread::yield();
      }
      ++revocations_;
      rebias_after_ = std::min(rebias_after_ * 2, kMaxRebias);
      streak_ = 0;
    }
    streak_ = last_ == me ? streak_ + 1 : 1;
    last_ = me;
    if (streak_ < rebias_after_ || me == 0) return;
    const std::uint64_t owner = owner_.load(std::memory_order_relaxed);
    if (owner == 0) owner_.store(me, std::memory_order_relaxed);  // chosen once: only this thread can match it
    if (owner == 0 || owner == me) biased_.store(true, std::memory_order_relaxed);  // the owner holds inner_ now
  }

  const bool asymmetric_;
  std::atomic<std::uint64_t> owner_{0};
  std::atomic<bool> owner_inside_{false};
  std::atomic<bool> biased_{false};
  bool by_owner_ = false;  // the holder entered by the bias: written by the holder only
  SpinLock inner_;
  // Under inner_:
  std::uint64_t last_ = 0;  // the token of the inner lock's last holder
  std::uint32_t streak_ = 0;  // how many times in a row it took it
  std::uint32_t rebias_after_ = kFirstBias;
  std::uint64_t revocations_ = 0;
};

using BiasedLock = BasicBiasedLock<>;

}  // namespace plimsoll::util
