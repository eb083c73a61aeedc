#pragma once
// The C ABI's one rule: no exception crosses it. Every entry point runs its body through guarded(), which turns
// each exception into a status code and keeps its message for plimsoll_last_error().
#include <exception>
#include <new>
#include <string>
#include <utility>

#include "plimsoll/error.hpp"
#include "plimsoll/oom.hpp"
#include "plimsoll/plimsoll.h"

namespace plimsoll::c_api {

/// This thread's last failure message; what plimsoll_last_error() returns.
std::string& last_error();

/// Keeps the message (built here, inside a try: building it may itself run out of memory) and returns `status`.
inline plimsoll_status fail(plimsoll_status status, const char* message, const char* prefix = "",
                            const char* suffix = "") noexcept {
  try {
    std::string& kept = last_error();
    kept = prefix;
    kept += message;
    kept += suffix;
  } catch (...) {
    // No memory even for the message: the status still says what happened.
    last_error().clear();
  }
  return status;
}

/// Runs `body` (which returns nothing) and maps what it throws. Most derived types first: OutOfMemory and the
/// others all derive from plimsoll::Error.
template <typename Body>
plimsoll_status guarded(Body&& body) noexcept {
  try {
    std::forward<Body>(body)();
    return PLIMSOLL_OK;
  } catch (const OutOfMemory& error) {
    return fail(PLIMSOLL_OUT_OF_MEMORY, error.what());
  } catch (const InvalidArgument& error) {
    return fail(PLIMSOLL_INVALID_ARGUMENT, error.what());
  } catch (const DeviceUnavailable& error) {
    return fail(PLIMSOLL_DEVICE_UNAVAILABLE, error.what());
  } catch (const InvalidState& error) {
    return fail(PLIMSOLL_INVALID_STATE, error.what());
  } catch (const InvalidFree& error) {
    return fail(PLIMSOLL_INVALID_FREE, error.what());
  } catch (const PauseError& error) {
    return fail(PLIMSOLL_PAUSE_FAILED, error.what());
  } catch (const std::bad_alloc&) {
    return fail(PLIMSOLL_OUT_OF_MEMORY,
                "out of memory: the host could not allocate plimsoll's own bookkeeping (std::bad_alloc); free host "
                "memory or raise the process's memory limit");
  } catch (const std::exception& error) {
    return fail(PLIMSOLL_INTERNAL, error.what(), "internal error in plimsoll: ",
                "; please report it with the call that failed");
  } catch (...) {
    return fail(PLIMSOLL_INTERNAL,
                "internal error in plimsoll: unknown exception; please report it with the call that failed");
  }
}

}  // namespace plimsoll::c_api
