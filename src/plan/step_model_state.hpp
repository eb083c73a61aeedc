#pragma once
// What StepModel holds: each recording, cut to its modelled steps, with every allocation's fitted size.
#include <cstdint>
#include <string>
#include <vector>

#include "plan/size_fit.hpp"
#include "plan/step_sequence.hpp"
#include "plimsoll/plan.hpp"

namespace plimsoll::plan {

struct ModelledRecording {
  Trace trace{};
  std::uint64_t batch = 0;
  StepSequence sequence{};
  std::vector<FittedSize> fits{};  // one per sequence allocation
};

}  // namespace plimsoll::plan

namespace plimsoll {

struct StepModel::State {
  std::vector<plan::ModelledRecording> recordings{};  // ascending batch
  std::string job{};
  std::size_t steps = 0;

  /// The recording whose events are replayed for `batch`: the nearest batch size on a log scale, ties to the
  /// larger.
  const plan::ModelledRecording& nearest(std::uint64_t batch) const;
};

}  // namespace plimsoll
