#pragma once
// Out-of-memory errors that explain themselves.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "plimsoll/error.hpp"
#include "plimsoll/stats.hpp"

namespace plimsoll {

/// Why an allocation failed, read from the numbers at the moment it failed.
enum class OomCause {
  limit_too_low,     // live data plus this request exceeds the limit: lower the batch or raise the limit
  fragmented,        // enough free bytes in total, but no free range large enough
  held_in_cache,     // cached free memory could not be released in time (should be rare: we trim and retry)
  device_taken,      // the device's memory is used by someone else: our limit was not reached
};
std::string_view to_string(OomCause cause);

struct OomDetails {
  std::uint64_t requested_bytes = 0;
  std::uint64_t rounded_bytes = 0;
  std::string device;
  std::string policy;
  std::string tag;
  std::uint64_t limit_bytes = 0;
  std::uint64_t in_use_bytes = 0;
  std::uint64_t reserved_bytes = 0;
  std::uint64_t largest_free_block = 0;
  std::uint64_t free_in_reserved_bytes = 0;   // reserved - in use
  std::uint64_t device_free_bytes = 0;        // what the device itself reported free
  std::uint64_t device_total_bytes = 0;       // the device's capacity; 0 when unknown
  std::uint64_t granule_bytes = 0;            // the device maps memory in granules of this size; 0 when unknown
  bool device_refused = false;                // the device refused memory that the limit allowed
  std::vector<TagStats> top_tags;
  OomCause cause = OomCause::limit_too_low;
  std::string suggestion;                     // one concrete thing to do
};

/// Thrown by Allocator::allocate. what() is the whole multi-line report.
class OutOfMemory : public Error {
 public:
  explicit OutOfMemory(OomDetails details);
  const OomDetails& details() const noexcept { return details_; }

 private:
  OomDetails details_;
};

/// Classifies the failure and writes the suggestion. Pure: golden-tested per cause.
OomDetails explain_oom(OomDetails numbers);
std::string format_oom(const OomDetails& details);

}  // namespace plimsoll
