#pragma once
// The greedy packings the offline packers try (pack_run, run_packing.hpp; plimsoll_step_plan_bound): every order
// the engine's packer has, with best fit and first fit, with and without the slide-down pass; and granule-aware by
// size and by size x lifetime (nothing paid for: every granule is new). One list, so every offline packing tries
// the same 14.
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/step_plan.hpp"

namespace plimsoll::engine {

struct NamedPacking {
  PackOptions options;
  std::string name;
};

inline std::vector<NamedPacking> greedy_packings(std::uint64_t granule) {
  const auto order_name = [](PackOrder order) {
    return order == PackOrder::size ? "size" : order == PackOrder::lifetime ? "lifetime" : "size x lifetime";
  };
  std::vector<NamedPacking> all;
  for (const PackOrder order : {PackOrder::size, PackOrder::lifetime, PackOrder::area})
    for (const bool best_fit : {true, false})
      for (const bool slide_down : {false, true})
        all.push_back({{order, best_fit, slide_down},
                       fmt::format("{} by {}{}", best_fit ? "best fit" : "first fit", order_name(order),
                                   slide_down ? ", slid down" : "")});
  for (const PackOrder order : {PackOrder::size, PackOrder::area})
    all.push_back({{order, true, false, granule}, fmt::format("granule-aware by {}", order_name(order))});
  return all;
}

}  // namespace plimsoll::engine
