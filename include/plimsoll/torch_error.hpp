#pragma once
// The error plimsoll_torch's CPU allocator throws when a host device cannot serve a tensor (docs/torch.md). Unlike
// plimsoll/torch.hpp this header includes libtorch's (c10's exception types), so include it only where you catch.
#include <c10/util/Exception.h>

namespace plimsoll::torch {

/// A CPU tensor that did not fit in its plimsoll device (its limit, or the host's memory). A c10::Error, as the
/// failure of libtorch's own CPU allocator (DefaultCPUAllocator) is, so libtorch's handlers and Python see what a
/// CPU allocation failure always was: PyTorch raises it as RuntimeError. Deliberately not c10::OutOfMemoryError,
/// which PyTorch raises as torch.cuda.OutOfMemoryError: code that handles GPU out-of-memory must not catch host
/// ones. msg() (and what_without_backtrace()) is plimsoll's whole out-of-memory report: device, request and tag,
/// limit, in use, reserved, largest free block, top tags, cause and fix.
class HostOutOfMemoryError : public c10::Error {
 public:
  using c10::Error::Error;
};

}  // namespace plimsoll::torch
