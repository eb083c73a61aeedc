#pragma once
// What a paused heap keeps: the granule runs it unmapped (to map back at the same addresses) and, when the
// contents are kept, each run's copy in host memory, given back by the backing's DeviceCopy when this goes.
#include <cstdint>
#include <vector>

#include "backings/device_copy.hpp"
#include "engine/heap.hpp"

namespace plimsoll::engine {

struct Heap::PausedState {
  struct Run {
    std::uint64_t first = 0;  // granule index
    std::uint64_t count = 0;
    void* contents = nullptr;  // host copy, or null
  };
  std::vector<Run> runs;
  backings::DeviceCopy* copy = nullptr;  // non-null when the contents are kept
  std::uint64_t granule = 0;

  PausedState() = default;
  PausedState(const PausedState&) = delete;
  PausedState& operator=(const PausedState&) = delete;
  ~PausedState() {
    for (Run& run : runs)
      if (run.contents != nullptr) copy->free_host(run.contents, run.count * granule);
  }
  std::uint64_t bytes() const {
    std::uint64_t total = 0;
    for (const Run& run : runs) total += run.count * granule;
    return total;
  }
};

}  // namespace plimsoll::engine
