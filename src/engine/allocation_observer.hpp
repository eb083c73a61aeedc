#pragma once
// What an Allocator tells whoever watches it: each allocation, free, map, unmap and OOM, as it happens. The engine
// knows only this interface; the trace recording (src/telemetry/recording/recording_observer.cpp) implements it, so the
// engine depends on no layer above it.
//
// Contract:
// - Every method is called under the allocator's lock, in the order the events happened on that device; an
//   observer serving several devices does its own locking. It must not call back into the allocator.
// - One observer per attached device: events carry no device, the observer knows which one it watches.
// - Maps and unmaps are the net change of mapped bytes around one allocator call, reported after the call's
//   allocation or free.
// - While nothing observes, the allocator's cost is one pointer test per call.
#include <cstdint>
#include <string>

#include "plimsoll/allocator.hpp"

namespace plimsoll::engine {

class AllocationObserver {
 public:
  virtual ~AllocationObserver() = default;

  /// `bytes` as requested (not rounded); `site` from capture_call_site(), or 0.
  virtual void allocated(std::uint64_t addr, std::uint64_t bytes, Tag tag, std::uint32_t site) = 0;
  virtual void freed(std::uint64_t addr) = 0;
  virtual void mapped(std::uint64_t bytes) = 0;
  virtual void unmapped(std::uint64_t bytes) = 0;
  /// A request that failed for lack of memory (after any release-and-retry).
  virtual void out_of_memory(std::uint64_t bytes, Tag tag, std::uint32_t site) = 0;

  /// Whether the allocator should capture the caller's stack for each allocation. Fixed for the observer's life,
  /// so the allocator may ask once.
  virtual bool wants_call_sites() const = 0;
  /// The calling stack's id, called before the allocation it names (0: none could be captured).
  virtual std::uint32_t capture_call_site() = 0;
  /// "function (file:line)" of an id from capture_call_site(); "" for 0.
  virtual std::string describe_call_site(std::uint32_t site) = 0;
};

}  // namespace plimsoll::engine
