#pragma once
// Whether libplimsoll_cuda_intercept.so governs this process: it is preloaded (the driver's memory calls resolve to
// its wrappers) and PLIMSOLL_SHARE is set. A Runtime then leaves its GPUs' ledger entries to it (docs/sharing.md,
// "Runtime devices and the interposer"): every cuMemCreate of the engine already passes through the interposer.
#include "devices/cuda_driver.hpp"

namespace plimsoll::sharing {

/// The symbol libplimsoll_cuda_intercept.so exports to say it is loaded (src/integrations/cuda_intercept): other
/// shims that wrap the driver's calls (HAMi-core, profilers) do not charge plimsoll's ledger, so wrapped calls alone
/// prove nothing.
inline constexpr const char* kInterposerMarker = "plimsoll_cuda_intercept_present";

/// True when plimsoll's interposer is loaded (kInterposerMarker resolves in the global scope) and `api`'s allocation
/// entry points (those the driver has) all live in the object that exports the marker: the interposer stands between
/// this code and the driver. A foreign shim serving them (preloaded before the interposer) makes it false.
bool memory_calls_interposed(const cuda_driver::Api& api);

/// memory_calls_interposed(api) and PLIMSOLL_SHARE is set (not empty), which the interposer reads.
bool interposer_governs(const cuda_driver::Api& api);

}  // namespace plimsoll::sharing
