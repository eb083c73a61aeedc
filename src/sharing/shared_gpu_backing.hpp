#pragma once
// The backing adaptor that puts an Allocator under a GPU share: every map() is charged to the process's share
// (refused when the ledger refuses, so the heap releases its cache and reports OutOfMemory), every unmap()
// credited, so memory the heap gives back (trim, pause) counts free for the other processes at once.
// Internal (backings are not installed, so the public header cannot name them): Runtime's devices and tests build
// Allocators over it.
#include <memory>

#include "backings/backing.hpp"
#include "plimsoll/sharing.hpp"

namespace plimsoll {

/// A refused charge that asked borrowers to give memory back is not waited for inside map(), which runs under the
/// allocator's lock: the allocator calls wait_for_memory() without its lock, then tries once more.
std::unique_ptr<backings::Backing> make_shared_gpu_backing(GpuShare& share, std::unique_ptr<backings::Backing> upstream);

}  // namespace plimsoll
