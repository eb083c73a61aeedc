// Which sample goes where, and the seed of its randomness: functions of (seed, epoch, index) alone, so a run is
// the same whatever the number of workers and whichever worker builds which batch.
#include <cstdint>
#include <utility>
#include <vector>

#include "pipeline/splitmix64.hpp"
#include "plimsoll/pipeline.hpp"

namespace plimsoll {
namespace {

// One SplitMix64 step as a hash: its output bits each depend on every input bit, so nearby inputs (index 7 and 8,
// epoch 1 and 2) give unrelated values.
constexpr std::uint64_t mix(std::uint64_t x) noexcept { return pipeline::SplitMix64(x).next(); }

}  // namespace

std::uint64_t sample_seed(std::uint64_t seed, std::uint64_t epoch, std::uint64_t index) noexcept {
  return mix(mix(mix(seed) ^ epoch) ^ index);
}

std::vector<std::uint64_t> epoch_order(std::uint64_t dataset_size, bool shuffle, std::uint64_t seed,
                                       std::uint64_t epoch) {
  std::vector<std::uint64_t> order(dataset_size);
  for (std::uint64_t i = 0; i < dataset_size; ++i) order[i] = i;
  if (!shuffle) return order;
  // Fisher-Yates driven by SplitMix64 rather than std::shuffle, whose draws differ between standard libraries: the
  // same (seed, epoch) must give the same order everywhere. The stream is keyed apart from sample seeds.
  pipeline::SplitMix64 random(mix(mix(seed ^ 0x5eed0f0e0c0ded00ULL) ^ epoch));
  for (std::uint64_t i = dataset_size; i > 1; --i) std::swap(order[i - 1], order[random.below(i)]);
  return order;
}

}  // namespace plimsoll
