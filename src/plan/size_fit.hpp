#pragma once
// One allocation's size as a function of the batch size, fitted to the sizes it had in the recordings.
#include <cstdint>
#include <utility>
#include <vector>

#include "plimsoll/plan.hpp"

namespace plimsoll::plan {

struct FittedSize {
  SizeFit kind = SizeFit::unmatched;
  double intercept = 0;  // linear: bytes = intercept + slope * batch
  double slope = 0;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> points{};  // (batch, bytes), ascending batch

  std::uint64_t bytes_at(std::uint64_t batch) const;
};

/// `points`: (batch, bytes) of one allocation in every recording where it has a counterpart; the first is the
/// recording whose allocation it is (what `unmatched` keeps).
FittedSize fit_size(std::vector<std::pair<std::uint64_t, std::uint64_t>> points);

}  // namespace plimsoll::plan
