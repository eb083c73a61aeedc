#pragma once
// Which allocation of one recording is which of another's, recorded at another batch size: same segment (before
// the steps, or step k), same tag and call site names, same position among those, and sizes that one line with
// no negative part can join (equal, or grown no faster than the batch size). Where the counts of a (tag, site)
// group differ, the longest common subsequence of compatible sizes pairs them (equal sizes preferred).
#include <cstdint>
#include <optional>
#include <vector>

#include "plan/step_sequence.hpp"
#include "plimsoll/trace.hpp"

namespace plimsoll::plan {

struct MatchSide {
  const Trace* trace = nullptr;
  const StepSequence* sequence = nullptr;
  std::uint64_t batch = 0;
};

/// For every allocation of `from`, its counterpart's index in `to`'s sequence, if any.
std::vector<std::optional<std::uint32_t>> match_allocations(const MatchSide& from, const MatchSide& to);

/// Whether `bytes_from` at `batch_from` and `bytes_to` at `batch_to` can lie on one line a + b * batch, a, b >= 0
/// (with a little slack for rounding).
bool sizes_compatible(std::uint64_t bytes_from, std::uint64_t batch_from, std::uint64_t bytes_to,
                      std::uint64_t batch_to);

}  // namespace plimsoll::plan
