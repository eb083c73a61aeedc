#pragma once
// The growth a device gets on a backing that cannot grow: a CUDA GPU without virtual memory management, whose
// backing takes a reservation's memory at once with cuMemAlloc and never gives part of it back. Only
// preallocate fits there (an on_demand heap reserves several times its limit to grow into).
#include <string>

#include "plimsoll/device.hpp"
#include "plimsoll/policy.hpp"

namespace plimsoll::runtime {

/// `policy` with growth preallocate. On_demand from the default policy (Policy's default, PLIMSOLL_ALLOW_GROWTH,
/// the config's "policy") gives way, since it was not chosen for this GPU; on_demand set for this device
/// while the default is preallocate (a "devices" entry, plimsoll_configure) throws InvalidArgument naming
/// `reason` (why there is no VMM) and the fix.
Policy fit_fixed_size(const std::string& device, Policy policy, const Config& config, const std::string& reason);

/// The note the "created device" line ends with on such a backing.
std::string fixed_size_note(const std::string& reason);

}  // namespace plimsoll::runtime
