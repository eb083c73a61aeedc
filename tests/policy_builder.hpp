#pragma once
// Policies spelled by the fields that matter, for the policy tests (designated initializers would trip
// -Wmissing-field-initializers).
#include <cstdint>

#include "plimsoll/policy.hpp"
#include "plimsoll/runtime.hpp"

namespace plimsoll {

class PolicyOf {
 public:
  PolicyOf& growth(Growth value) {
    policy_.growth = value;
    return *this;
  }
  PolicyOf& limit(std::uint64_t bytes) {
    policy_.memory_limit = bytes;
    return *this;
  }
  PolicyOf& fraction(double share) {
    policy_.memory_fraction = share;
    return *this;
  }
  PolicyOf& reserve(std::uint64_t bytes) {
    policy_.reserve = bytes;
    return *this;
  }
  PolicyOf& threshold(std::uint64_t bytes) {
    policy_.release_threshold = bytes;
    return *this;
  }
  operator Policy() const { return policy_; }  // NOLINT(google-explicit-constructor): reads as a Policy

 private:
  Policy policy_;
};

/// A runtime config whose default policy has `growth` and `limit` and no reserve, and that logs nothing: the
/// replays of the telemetry tests.
inline Config quiet_config(Growth growth, std::uint64_t limit) {
  Config config;
  config.log_device_creation = false;
  config.default_policy.growth = growth;
  config.default_policy.memory_limit = limit;
  config.default_policy.reserve = 0;
  return config;
}

}  // namespace plimsoll
