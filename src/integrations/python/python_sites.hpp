#pragma once
// Python frames as the call sites of recorded allocations (python_sites.cpp).
namespace plimsoll::python {

/// Whether this build reads Python frames (CPython 3.11's frame layout); otherwise call sites stay native.
bool python_sites_supported() noexcept;
/// Names recorded call sites by the allocating thread's innermost Python frame ("file.py:LINE") when it has one;
/// native stacks otherwise. Off again with false.
void enable_python_sites(bool on) noexcept;

}  // namespace plimsoll::python
