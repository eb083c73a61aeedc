#pragma once
// Wraps another backing and makes map() and reserve() fail on purpose, at random (seeded, so a failing test
// replays exactly) or at a chosen call, so that the engine's out-of-memory paths can be tested.
// Everything else goes straight to the wrapped backing.
#include <atomic>
#include <cstdint>
#include <mutex>
#include <random>
#include <string>

#include "backings/backing_adaptor.hpp"

namespace plimsoll::backings {

struct FaultPlan {
  double map_failure_probability = 0.0;      // each map() call fails with this chance, in [0, 1]
  double reserve_failure_probability = 0.0;  // each reserve() call fails with this chance, in [0, 1]
  std::uint64_t seed = 0;
  std::uint64_t fail_map_call = 0;      // the Nth map() call (counting from 1) fails; 0: none
  std::uint64_t fail_reserve_call = 0;  // the Nth reserve() call (counting from 1) fails; 0: none
};

class FaultyBacking final : public BackingAdaptor {
 public:
  /// `upstream` must outlive this. Throws InvalidArgument when a probability is outside [0, 1].
  FaultyBacking(Backing& upstream, const FaultPlan& plan);

  std::uint64_t map_calls() const noexcept { return map_calls_.load(); }
  std::uint64_t reserve_calls() const noexcept { return reserve_calls_.load(); }
  std::uint64_t injected_map_failures() const noexcept { return injected_map_failures_.load(); }
  std::uint64_t injected_reserve_failures() const noexcept { return injected_reserve_failures_.load(); }
  std::uint64_t injected_failures() const noexcept { return injected_map_failures() + injected_reserve_failures(); }

 private:
  /// An injected failure returns 0 without asking the upstream.
  std::uintptr_t do_reserve(std::uint64_t bytes) override;
  /// An injected failure returns false without asking the upstream, so nothing is mapped.
  bool do_map(std::uintptr_t addr, std::uint64_t bytes) override;
  std::string do_describe() const override;
  /// fork(): the draws' lock. Only taken inside this backing's lock, which the fork holds already; taken anyway so
  /// the child's first draw never depends on that staying so.
  void do_lock_own_for_fork() noexcept override { random_mutex_.lock(); }  // NOLINT: released after the fork
  void do_unlock_own_after_fork() noexcept override { random_mutex_.unlock(); }

  /// Counts the call and says whether to fail it.
  bool should_fail(std::atomic<std::uint64_t>& calls, std::uint64_t fail_call, double probability);

  const FaultPlan plan_;
  std::mutex random_mutex_;  // taken inside the backing's lock; kept so the draws never depend on it
  std::mt19937_64 random_;
  std::atomic<std::uint64_t> map_calls_{0};
  std::atomic<std::uint64_t> reserve_calls_{0};
  std::atomic<std::uint64_t> injected_map_failures_{0};
  std::atomic<std::uint64_t> injected_reserve_failures_{0};
};

}  // namespace plimsoll::backings
