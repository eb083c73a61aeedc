#include "runtime/fixed_size_growth.hpp"

#include <fmt/format.h>

#include "plimsoll/error.hpp"

namespace plimsoll::runtime {

Policy fit_fixed_size(const std::string& device, Policy policy, const Config& config, const std::string& reason) {
  if (policy.growth == Growth::on_demand && config.default_policy.growth == Growth::preallocate) {
    throw InvalidArgument(fmt::format(
        "{} cannot grow on demand: {}, so plimsoll allocates it with plain cuMemAlloc regions taken whole; set "
        "\"growth\": \"preallocate\" for {} (and a memory_limit or memory_fraction for the size to take), or "
        "remove its on_demand setting",
        device, reason, device));
  }
  policy.growth = Growth::preallocate;
  return policy;
}

std::string fixed_size_note(const std::string& reason) {
  return fmt::format("; plain CUDA regions, preallocated because {}", reason);
}

}  // namespace plimsoll::runtime
