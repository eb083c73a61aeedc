#include "plimsoll/policy.hpp"

namespace plimsoll {

// The most specific entry wins: a logical device's own entry ("cuda:0/1"), then its physical device's ("cuda:0"),
// so one entry can set a policy for every logical device of a GPU; then the default.
Policy Config::policy_for(const DeviceName& device) const {
  if (auto exact = device_policies.find(device.str()); exact != device_policies.end()) return exact->second;
  if (device.logical >= 0) {
    if (auto physical = device_policies.find(device.physical().str()); physical != device_policies.end()) {
      return physical->second;
    }
  }
  return default_policy;
}

}  // namespace plimsoll
