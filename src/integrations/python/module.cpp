// `_plimsoll`, the extension behind `import plimsoll` (docs/python.md). A shell: each binding translates Python
// values to a library call and back; the Python package (python/plimsoll) adds the context managers and hooks.
#include <pybind11/pybind11.h>

#include "bindings.hpp"

PYBIND11_MODULE(_plimsoll, module) {
  module.doc() = "plimsoll's native core: devices, scopes, steps, recordings, reports and NumPy's memory handler";
  plimsoll::python::bind_errors(module);
  plimsoll::python::bind_devices(module);
  plimsoll::python::bind_reports(module);
}
