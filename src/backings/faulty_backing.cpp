#include "backings/faulty_backing.hpp"

#include <string_view>

#include <fmt/format.h>

#include "plimsoll/error.hpp"

namespace plimsoll::backings {
namespace {

double validated_probability(std::string_view name, double probability) {
  if (!(probability >= 0.0 && probability <= 1.0))  // written so that NaN fails too
    throw InvalidArgument(fmt::format("fault injection: {} is {}; give a probability between 0 and 1", name,
                                      probability));
  return probability;
}

FaultPlan validated(const FaultPlan& plan) {
  validated_probability("the map failure probability", plan.map_failure_probability);
  validated_probability("the reserve failure probability", plan.reserve_failure_probability);
  return plan;
}

/// A uniform draw in [0, 1) from the top 53 bits, the same on every standard library (the standard's
/// distributions are not), so a seed replays the same failures everywhere.
double unit_interval(std::mt19937_64& random) {
  constexpr double kTwoToMinus53 = 1.0 / static_cast<double>(std::uint64_t{1} << 53);
  return static_cast<double>(random() >> 11) * kTwoToMinus53;
}

std::string nth_call(std::uint64_t call) { return call == 0 ? std::string("none") : fmt::format("#{}", call); }

}  // namespace

FaultyBacking::FaultyBacking(Backing& upstream, const FaultPlan& plan)
    : BackingAdaptor("faulty", upstream), plan_(validated(plan)), random_(plan.seed) {}

std::uintptr_t FaultyBacking::do_reserve(std::uint64_t bytes) {
  if (should_fail(reserve_calls_, plan_.fail_reserve_call, plan_.reserve_failure_probability)) {
    injected_reserve_failures_.fetch_add(1);
    return 0;
  }
  return upstream().reserve(bytes);
}

bool FaultyBacking::do_map(std::uintptr_t addr, std::uint64_t bytes) {
  if (should_fail(map_calls_, plan_.fail_map_call, plan_.map_failure_probability)) {
    injected_map_failures_.fetch_add(1);
    return false;
  }
  return upstream().map(addr, bytes);
}

bool FaultyBacking::should_fail(std::atomic<std::uint64_t>& calls, std::uint64_t fail_call, double probability) {
  const std::lock_guard lock(random_mutex_);
  const std::uint64_t call = calls.fetch_add(1) + 1;
  // Drawn on every call, so the random failures do not shift when a chosen call is added to the plan.
  const bool random_failure = unit_interval(random_) < probability;
  return call == fail_call || random_failure;
}

std::string FaultyBacking::do_describe() const {
  return fmt::format("{} with injected faults (map p={}, reserve p={}, seed {}, failing map call {}, "
                     "failing reserve call {})",
                     upstream().describe(), plan_.map_failure_probability, plan_.reserve_failure_probability,
                     plan_.seed, nth_call(plan_.fail_map_call), nth_call(plan_.fail_reserve_call));
}

}  // namespace plimsoll::backings
