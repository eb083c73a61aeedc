#pragma once
// Step-aware placement: how often to pack again while the plans packed do not fit the limit.
//
// A plan that cannot be mapped under the limit (StepPlanStats::unfit) is not followed; best fit runs, and the next
// boundary packs again around what best fit left, which may now fit (docs/engine.md, "Against the target"). Each
// pack costs O(requests^2) in the thread calling step(), so a job whose plans never fit (a limit below any plan)
// must not pay one at every boundary forever. The rule: pack at every boundary while the unfit
// plans make progress, i.e. until kPatience packs in a row found none needing fewer granules than the best unfit
// plan so far; then after 2, 4, 8, ... boundaries (1024 at most), and at every one again as soon as a pack beats
// that best. Progress is measured against the best so far, not the last: with the dropped rule that followed unfit
// plans' leftovers (bench/experiments/follow_unfit_leftovers.patch), ResNet-50's unfit plans at 1.01 x needed 1527,
// 1498, 1494, 1494, 1499, 1492, 1499 granules and then fit, and backing off at the first pack no cheaper than the
// one before (1494 after 1494) kept it from converging. Since the best can only fall a finite number of times
// (granules are whole), the packs a non-converging job pays at every boundary are bounded.
// A step that grows (keeps blocks without freeing older copies) changes at every boundary, so its unfit plans are
// packed again after 1, 3, 7, ... boundaries (1023 at most) along the recent run of unfit plans: the run since a
// plan last fit (reset) or a pack last beat the best so far, never the job's whole history (a job with many unfit
// plans long ago must not wait 1023 boundaries after its first unfit plan today).
#include <algorithm>
#include <cstdint>

namespace plimsoll::engine {

class UnfitBackoff {
 public:
  static constexpr std::uint64_t kPatience = 3;
  static constexpr std::uint64_t kMaxWait = 1024;

  /// After a pack whose plan did not fit and needs `granules`: how many boundaries to wait before packing again
  /// (1: at the next one).
  std::uint64_t after_unfit(std::uint64_t granules) {
    if (count_pack(granules) || misses_ < kPatience) return 1;
    return std::uint64_t{1} << std::min<std::uint64_t>(misses_ - kPatience + 1, 10);  // 2, 4, ... kMaxWait
  }
  /// The same for a step that grows: 1, 3, 7, ... kMaxWait - 1 along the run of unfit plans since the last reset
  /// or the last new best.
  std::uint64_t after_unfit_growing(std::uint64_t granules) {
    count_pack(granules);
    return (std::uint64_t{1} << std::min<std::uint64_t>(misses_ + 1, 10)) - 1;
  }
  /// A plan fit: the next unfit one starts afresh (the step or the limit changed since).
  void reset() { *this = UnfitBackoff{}; }

 private:
  // An unfit pack needing `granules`: a new best ends the run of misses (true), anything else lengthens it.
  bool count_pack(std::uint64_t granules) {
    if (granules < best_) {
      best_ = granules;
      misses_ = 0;
      return true;
    }
    ++misses_;
    return false;
  }

  std::uint64_t best_ = UINT64_MAX;  // the fewest granules an unfit plan since the last reset needed
  std::uint64_t misses_ = 0;         // unfit packs in a row since best_ was last beaten
};

}  // namespace plimsoll::engine
