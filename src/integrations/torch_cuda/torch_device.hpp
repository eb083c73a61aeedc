#pragma once
// What libplimsoll_torch_cuda.so's C functions do for one device, over its Allocator, so that the library
// (torch-free, testable on the fake driver) holds the logic and torch_cuda.cpp only finds the device and
// translates. Stream order is the engine's (docs/engine.md, "CUDA backings and streams"): a block freed on a
// stream is reused at once on that stream, as PyTorch's own allocator does, and by other streams once the work
// queued before the free has completed.
#include <cstddef>
#include <cstdint>
#include <string>

#include "plimsoll/allocator.hpp"

namespace plimsoll::torch_cuda {

// The functions below marked "Never throws" are noexcept and run out of host memory as anywhere else: a reason that
// cannot be copied into `why` (its copy allocates) leaves `why` empty rather than end the process, and the caller
// (torch_cuda.cpp) then says a fixed message, which needs no allocation.

/// `bytes` on `stream`; nullptr with plimsoll's out-of-memory report (or other failure) in `why`. Never throws.
void* torch_malloc(Allocator& allocator, std::size_t bytes, void* stream, std::string& why) noexcept;
/// Frees `ptr` on `stream`; false with the reason in `why` (not a live block: freed twice, never allocated here).
/// Never throws.
bool torch_free(Allocator& allocator, void* ptr, void* stream, std::string& why) noexcept;
/// Allocator::record_stream for PyTorch's record_stream hook: false with the reason in `why` (not a live block of
/// this device; or out of host memory with the fallback's room taken too: the block's streams unchanged). Never
/// throws.
bool torch_record_stream(Allocator& allocator, void* ptr, void* stream, std::string& why) noexcept;
/// The device's counters as one JSON object: plimsoll's names and the keys of torch.cuda.memory_stats() that
/// have a plimsoll counterpart ("allocated_bytes.all.current", "reserved_bytes.all.peak", ...).
std::string stats_json(const Allocator& allocator, int device);
/// torch.cuda.empty_cache for this device: waits for the work queued before the parked frees, then gives every
/// cached granule back to the driver. Returns the bytes released.
std::uint64_t empty_cache(Allocator& allocator);
/// Allocator::pause for PyTorch: the bytes given back, or -1 with the reason in `why`. Never throws.
long long pause(Allocator& allocator, bool keep_contents, std::string& why) noexcept;
/// Allocator::resume: false with the reason in `why` (the device then stays paused). Never throws.
bool resume(Allocator& allocator, std::string& why) noexcept;

}  // namespace plimsoll::torch_cuda
