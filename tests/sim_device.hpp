#pragma once
// The description of a simulated 4 GiB device for tests that build an Allocator over a backings::SimBacking.
#include <cstdint>

#include "plimsoll/allocator.hpp"

namespace plimsoll::testing_support {

/// A simulated device of 4 GiB with the given limit (1 GiB unless told).
inline DeviceDescription sim_device(std::uint64_t limit = std::uint64_t{1} << 30) {
  DeviceDescription d;
  d.name = "sim:4GiB";
  d.hardware = "simulated device";
  d.limit_bytes = limit;
  d.total_bytes = std::uint64_t{4} << 30;
  return d;
}

}  // namespace plimsoll::testing_support
