#pragma once
// The environment variables of GPU sharing read inside a governed process (docs/sharing.md lists them all).
#include <chrono>
#include <cstdint>
#include <optional>

namespace plimsoll::sharing {

/// PLIMSOLL_SHARE_TRIM_WAIT_MS: how long a process refused within its share waits for borrowers to trim
/// (default 200 ms; 0: not at all).
std::chrono::milliseconds trim_wait();
/// PLIMSOLL_SHARE_CONTEXT_BYTES: the CUDA context's cost to charge instead of measuring it.
std::optional<std::uint64_t> context_bytes_override();

}  // namespace plimsoll::sharing
