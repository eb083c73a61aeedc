#pragma once
// Policies spelled by the fields that matter, for the policy tests (designated initializers would trip
// -Wmissing-field-initializers).
#include <cstdint>

#include "plimsoll/policy.hpp"

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

}  // namespace plimsoll
