#pragma once
// NumPy's array data from a plimsoll host device, through NumPy's data-memory handler (NEP 49).
#include <string>
#include <string_view>

namespace plimsoll { class Allocator; }

namespace plimsoll::python {

/// Installs plimsoll's handler with PyDataMem_SetHandler for the calling context (NumPy keeps the handler in a
/// context variable; the Python side calls install_numpy_in_this_thread as each new thread starts).
/// Arrays allocated afterwards come from `device` (or the device of an enclosing plimsoll.device() scope); the
/// handler that was current before serves the frees of arrays it made. Imports numpy's C API on first use; throws
/// InvalidState naming the reason when NumPy is older than 1.22 (no NEP 49).
void install_numpy(Allocator& device);
/// Sets plimsoll's handler in the calling thread's context too (NumPy's handler lives in a context variable, and
/// every Python thread starts with a fresh context: NumPy's default handler). No-op before install_numpy().
void install_numpy_in_this_thread();
/// Puts the previous handler back; plimsoll's arrays still free into plimsoll.
void uninstall_numpy();
bool numpy_installed() noexcept;

/// This thread's device and tag for NumPy data, set by plimsoll.device() / plimsoll.tag() scopes (nullptr and
/// "" restore the defaults). Return the previous values, for the scope's exit.
Allocator* set_thread_device(Allocator* device) noexcept;
std::string set_thread_tag(std::string_view tag);

/// The OutOfMemory report of this thread's last refused NumPy allocation, then cleared ("" when none): NumPy
/// raises its own MemoryError when the handler returns NULL, and plimsoll's Python side attaches this to it.
std::string take_last_oom();

}  // namespace plimsoll::python
