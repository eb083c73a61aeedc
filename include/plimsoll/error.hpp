#pragma once
// Errors plimsoll throws. Every message names the problem and the fix.
#include <stdexcept>
#include <string>

namespace plimsoll {

/// Base of every plimsoll exception.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Bad input: a size, device string, policy value, config file or trace that cannot be used.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

/// A device that was asked for does not exist (and CPU fallback is off).
class DeviceUnavailable : public Error {
 public:
  using Error::Error;
};

/// A policy change after the device's first allocation, and other calls made in the wrong order.
class InvalidState : public Error {
 public:
  using Error::Error;
};

/// A free of an address that is not a live allocation (never allocated, or already freed).
class InvalidFree : public Error {
 public:
  using Error::Error;
};

/// Allocator::pause or resume could not be carried out: no host memory for the contents, a copy that failed, or
/// memory that is not available again at resume (other processes hold it now). Nothing is lost: a device that was
/// running still runs, a paused one stays paused and resume may be called again.
class PauseError : public Error {
 public:
  using Error::Error;
};

}  // namespace plimsoll
