// `_plimsoll_torch`: plimsoll_torch (plimsoll as c10's CPU allocator) for Python, loaded by plimsoll only when the
// running `torch` uses the libtorch this module was built against (python/plimsoll/_hooks.py checks).
#include <pybind11/pybind11.h>

#include <memory>
#include <string>

#include "plimsoll/torch.hpp"

namespace py = pybind11;

namespace {

// Context managers for DeviceScope and TagScope: the scope lives from __enter__ to __exit__.
struct DeviceScopeHolder {
  std::string device;
  std::unique_ptr<plimsoll::torch::DeviceScope> scope;
};
struct TagScopeHolder {
  std::string tag;
  std::unique_ptr<plimsoll::torch::TagScope> scope;
};

}  // namespace

PYBIND11_MODULE(_plimsoll_torch, m) {
  m.doc() = "plimsoll as libtorch's CPU allocator (plimsoll_torch, docs/torch.md)";
  m.def("install", [](const std::string& device) { plimsoll::torch::install(device); }, py::arg("device") = "cpu",
        "Every CPU tensor allocated from now on comes from this plimsoll device (outside any device scope).");
  m.def("uninstall", &plimsoll::torch::uninstall);
  m.def("installed", &plimsoll::torch::installed);
  m.def("current_tag", [] { return std::string(plimsoll::torch::current_tag()); });
  py::class_<DeviceScopeHolder>(m, "DeviceScope")
      .def(py::init([](std::string device) { return DeviceScopeHolder{std::move(device), nullptr}; }))
      .def("__enter__", [](DeviceScopeHolder& self) { self.scope = std::make_unique<plimsoll::torch::DeviceScope>(self.device); })
      .def("__exit__", [](DeviceScopeHolder& self, const py::args&) { self.scope.reset(); });
  py::class_<TagScopeHolder>(m, "TagScope")
      .def(py::init([](std::string tag) { return TagScopeHolder{std::move(tag), nullptr}; }))
      .def("__enter__", [](TagScopeHolder& self) { self.scope = std::make_unique<plimsoll::torch::TagScope>(self.tag); })
      .def("__exit__", [](TagScopeHolder& self, const py::args&) { self.scope.reset(); });
}
