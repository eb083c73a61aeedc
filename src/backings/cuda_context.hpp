#pragma once
// The device's primary context, held for a backing's life and made current around each group of driver
// calls. cuMemAlloc, cuMemGetInfo and cuCtxSynchronize act on the calling thread's current context, and the
// engine calls a backing from whichever thread allocates, so every entry point pushes the context and pops
// it again, leaving the caller's own context (PyTorch's, say) as it was. The primary context is the one
// the CUDA runtime and PyTorch share, so retaining it costs no second context on the GPU.
#include <new>
#include <string>
#include <string_view>

#include "backings/backing.hpp"
#include "devices/cuda_driver.hpp"

namespace plimsoll::backings {

/// For a driver call that fails where nothing can be reported (noexcept unmap and unreserve): going on would
/// leave the heap believing memory gone that the device still holds, or mapped that is not. Says what failed
/// on stderr and aborts. Typically a sticky error after a kernel fault, when the context is lost anyway.
[[noreturn]] void abort_on_driver_failure(const std::string& what) noexcept;

class CudaPrimaryContext {
 public:
  /// Throws DeviceUnavailable when the driver cannot retain the context.
  CudaPrimaryContext(const cuda_driver::Api& api, cuda_driver::Device device);
  ~CudaPrimaryContext();
  CudaPrimaryContext(const CudaPrimaryContext&) = delete;
  CudaPrimaryContext& operator=(const CudaPrimaryContext&) = delete;

  cuda_driver::Device device() const noexcept { return device_; }
  cuda_driver::Context handle() const noexcept { return context_; }
  /// cuMemGetInfo in this context: the whole device, other processes' use included. Throws Error on failure.
  BackingMemory memory() const;

  /// The context is current on this thread while a Scope lives.
  class Scope {
   public:
    /// Throws DeviceUnavailable (naming `operation`) when the context cannot be made current.
    Scope(const CudaPrimaryContext& context, std::string_view operation);
    /// For noexcept callers: aborts instead of throwing, since they cannot report anything.
    Scope(const CudaPrimaryContext& context, std::string_view operation, std::nothrow_t) noexcept;
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    const cuda_driver::Api& api_;
  };

 private:
  const cuda_driver::Api& api_;
  const cuda_driver::Device device_;
  cuda_driver::Context context_ = nullptr;
};

}  // namespace plimsoll::backings
