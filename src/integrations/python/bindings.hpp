#pragma once
// The parts of the `_plimsoll` module, one function per concern.
#include <pybind11/pybind11.h>

namespace plimsoll::python {

/// plimsoll.Error and its subclasses (OutOfMemory is also a MemoryError, InvalidArgument also a ValueError), and
/// the translation of plimsoll's C++ exceptions into them.
void bind_errors(pybind11::module_& module);
/// Devices, stats, policies, scopes for NumPy, the NumPy hook, steps and Python call sites.
void bind_devices(pybind11::module_& module);
/// Recordings, plimsoll.leaks, plimsoll.replay and plimsoll.estimate.batch.
void bind_reports(pybind11::module_& module);

}  // namespace plimsoll::python
