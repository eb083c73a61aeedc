#pragma once
// Counters a device keeps. Cheap to read: a copy taken under the device's lock.
#include <cstdint>
#include <string>
#include <vector>

namespace plimsoll {

struct TagStats {
  std::string tag;
  std::uint64_t in_use_bytes = 0;
  std::uint64_t peak_in_use_bytes = 0;
  std::uint64_t allocations = 0;  // live allocations
};

struct MemoryUsage {
  std::uint64_t in_use_bytes = 0;    // as Stats::in_use_bytes
  std::uint64_t reserved_bytes = 0;  // as Stats::reserved_bytes
};

struct Stats {
  std::uint64_t in_use_bytes = 0;        // rounded sizes of live allocations
  std::uint64_t requested_bytes = 0;     // sizes as asked for, of live allocations
  std::uint64_t peak_in_use_bytes = 0;
  std::uint64_t reserved_bytes = 0;      // backed by the device (mapped granules)
  std::uint64_t peak_reserved_bytes = 0;
  std::uint64_t largest_free_block = 0;  // largest request that fits in reserved memory right now
  std::uint64_t limit_bytes = 0;
  std::uint64_t allocations = 0;         // counts since creation
  std::uint64_t frees = 0;
  std::uint64_t ooms = 0;
  std::uint64_t maps = 0;                // map calls on the backing
  std::uint64_t unmaps = 0;
  std::uint64_t live_allocations = 0;
  // CUDA devices: blocks the program freed on a stream whose queued work may still use them, not counted in
  // in_use_bytes. Their stream may reuse them now, every other stream once the work completed.
  std::uint64_t parked_bytes = 0;
  // Address space the device's heap reserved up front (what `top` counts as VIRT for a host device): a span
  // larger than the limit, so the heap can grow in place. It costs no memory until mapped.
  std::uint64_t address_space_bytes = 0;
  // Host backings only (zero elsewhere): pages committed (mapped read/write, counted against the device's
  // capacity) and pages resident in RAM (touched). docs/engine.md, "Host memory", explains the three.
  std::uint64_t committed_bytes = 0;
  std::uint64_t resident_bytes = 0;
  std::vector<TagStats> tags;            // by current bytes, largest first
};

}  // namespace plimsoll
