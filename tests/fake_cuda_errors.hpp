#pragma once
// The CUresult codes and names both fake drivers use: the in-process one (fake_cuda_driver.hpp) and the real
// shared library libcuda.so.1 built for tests (fake_libcuda/). Values from cuda.h.
#include "devices/cuda_driver.hpp"

namespace plimsoll::fake_cuda {

constexpr cuda_driver::Result kErrorNotInitialized = 3;    // CUDA_ERROR_NOT_INITIALIZED
constexpr cuda_driver::Result kErrorInvalidDevice = 101;   // CUDA_ERROR_INVALID_DEVICE
constexpr cuda_driver::Result kErrorInvalidContext = 201;  // CUDA_ERROR_INVALID_CONTEXT
constexpr cuda_driver::Result kErrorInvalidHandle = 400;   // CUDA_ERROR_INVALID_HANDLE
constexpr cuda_driver::Result kErrorNotFound = 500;        // CUDA_ERROR_NOT_FOUND

/// The driver's name for `error`, or nullptr for a code neither fake returns.
inline const char* error_name(cuda_driver::Result error) noexcept {
  switch (error) {
    case cuda_driver::kSuccess: return "CUDA_SUCCESS";
    case cuda_driver::kErrorInvalidValue: return "CUDA_ERROR_INVALID_VALUE";
    case cuda_driver::kErrorOutOfMemory: return "CUDA_ERROR_OUT_OF_MEMORY";
    case kErrorNotInitialized: return "CUDA_ERROR_NOT_INITIALIZED";
    case cuda_driver::kErrorNoDevice: return "CUDA_ERROR_NO_DEVICE";
    case kErrorInvalidDevice: return "CUDA_ERROR_INVALID_DEVICE";
    case kErrorInvalidContext: return "CUDA_ERROR_INVALID_CONTEXT";
    case kErrorInvalidHandle: return "CUDA_ERROR_INVALID_HANDLE";
    case kErrorNotFound: return "CUDA_ERROR_NOT_FOUND";
    case cuda_driver::kErrorNotReady: return "CUDA_ERROR_NOT_READY";
    case cuda_driver::kErrorNotSupported: return "CUDA_ERROR_NOT_SUPPORTED";
    default: return nullptr;
  }
}

}  // namespace plimsoll::fake_cuda
