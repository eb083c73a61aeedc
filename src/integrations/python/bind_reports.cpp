// Errors, recordings and the reports (`plimsoll.leaks`, `plimsoll.replay`, `plimsoll.estimate.batch`) for
// `_plimsoll`. The reports return what the command line's --json prints, built by the same library functions.
#include <pybind11/stl.h>

#include <cstdlib>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bindings.hpp"
#include "plimsoll/error.hpp"
#include "plimsoll/estimate.hpp"
#include "plimsoll/oom.hpp"
#include "plimsoll/recording.hpp"
#include "plimsoll/runtime.hpp"
#include "plimsoll/size.hpp"
#include "plimsoll/trace.hpp"
#include "telemetry/leaks/leak_watch.hpp"
#include "telemetry/replay/replay.hpp"
#include "telemetry/reports/report_json.hpp"

namespace py = pybind11;

namespace plimsoll::python {
namespace {

py::object json_loads(const std::string& text) { return py::module_::import("json").attr("loads")(text); }

// The devices some open PyRecording records. A device writes to one recording at a time, so a second recording
// would silently take it from the first (under `plimsoll run`, from the run's own, whose leak watch would then see
// nothing). Only touched with the GIL held.
std::set<Allocator*>& recorded_devices() {
  static std::set<Allocator*> devices;
  return devices;
}

// A recording with the devices it is attached to (so close() can detach them).
struct PyRecording {
  std::shared_ptr<Recording> recording;
  std::vector<Allocator*> devices;

  void detach() {
    for (Allocator* device : devices) {
      device->record_to(nullptr);
      recorded_devices().erase(device);
    }
    devices.clear();
  }
  void close() {
    detach();
    recording->close();
  }
  // In a forked child: the file and the unwritten buffer are the parent's. Detach without writing anything, and
  // keep the recording alive for good so no destructor flushes the parent's events a second time.
  void abandon() {
    detach();
    new std::shared_ptr<Recording>(std::move(recording));  // deliberately never freed
    recording.reset();
  }
};

std::shared_ptr<PyRecording> open_recording(const std::string& path, const std::vector<std::string>& devices,
                                            bool call_sites, std::size_t buffer_bytes) {
  auto out = std::make_shared<PyRecording>();
  RecordingOptions options;
  options.call_sites = call_sites;
  if (buffer_bytes != 0) options.buffer_bytes = buffer_bytes;
  // Every device is found and checked before anything is attached: a bad name leaves nothing half recorded.
  std::vector<Allocator*> targets;
  for (const std::string& name : devices) {
    Allocator& device = Runtime::global().device(name);
    if (recorded_devices().count(&device) != 0) {
      const bool under_run = std::getenv("PLIMSOLL_RUN_RECORD") != nullptr;
      throw InvalidState(fmt::format(
          "{} is already being recorded{}: a device writes to one recording at a time; {}", name,
          under_run ? " by plimsoll run" : "",
          under_run ? "keep the run's recording with `plimsoll run --record FILE` instead"
                    : "close the other recording first (its close(), or leave its `with` block)"));
    }
    targets.push_back(&device);
  }
  out->recording = Recording::open(path, options);
  for (Allocator* device : targets) {
    device->record_to(out->recording);
    recorded_devices().insert(device);
    out->devices.push_back(device);
  }
  return out;
}

py::object leaks(const std::string& path) {
  const Trace trace = read_trace(path);
  return json_loads(telemetry::leak_report_json(trace, telemetry::find_leaks(trace)));
}

py::object replay(const std::string& path, const std::string& device, const std::optional<std::string>& policy,
                  const std::optional<std::string>& memory_limit) {
  const Trace trace = read_trace(path);
  Config config;
  if (policy) config.default_policy.growth = parse_growth(*policy);
  if (memory_limit) config.default_policy.memory_limit = parse_size(*memory_limit);
  config.log_device_creation = false;
  Runtime runtime(config);  // a fresh device: peaks belong to this replay alone, as in `plimsoll replay`
  return json_loads(telemetry::replay_result_json(telemetry::replay(trace, runtime.device(device))));
}

py::object estimate_batch(const std::string& shape, std::uint64_t batch, const std::string& dtype, std::uint64_t queue,
                        std::uint64_t workers, const std::optional<std::string>& budget) {
  BatchPipeline pipeline;
  pipeline.sample = parse_shape(shape);
  pipeline.batch = batch;
  pipeline.dtype = parse_dtype(dtype);
  pipeline.queue_depth = queue;
  pipeline.workers = workers;
  if (budget) pipeline.budget = parse_size(*budget);
  const BatchEstimate estimate = estimate_batch(pipeline);
  return json_loads(telemetry::batch_estimate_json(pipeline, estimate));
}

}  // namespace

void bind_errors(py::module_& m) {
  // Made with PyErr_NewException so a class can have two bases (OutOfMemory is also a MemoryError).
  const auto make = [&m](const char* name, PyObject* bases, const char* doc) {
    PyObject* type = PyErr_NewExceptionWithDoc((std::string("plimsoll.") + name).c_str(), doc, bases, nullptr);
    if (type == nullptr) throw py::error_already_set();
    m.attr(name) = py::reinterpret_steal<py::object>(type);
    return type;
  };
  PyObject* error = make("Error", PyExc_Exception, "Base of every plimsoll error; the message names the problem and the fix.");
  const auto pair = [error](PyObject* other) { return py::make_tuple(py::handle(error), py::handle(other)); };
  static PyObject* invalid_argument = make("InvalidArgument", pair(PyExc_ValueError).release().ptr(),
                                           "Bad input: a size, device, policy value, config file or trace.");
  static PyObject* device_unavailable = make("DeviceUnavailable", error, "A device that does not exist.");
  static PyObject* invalid_state = make("InvalidState", error, "A call made in the wrong order.");
  static PyObject* invalid_free = make("InvalidFree", error, "A free of an address that is not live.");
  static PyObject* pause_error = make("PauseError", error,
                                      "A pause or resume not carried out (nothing lost; a paused device stays paused).");
  static PyObject* out_of_memory = make("OutOfMemory", pair(PyExc_MemoryError).release().ptr(),
                                        "A device's budget cannot hold a request; the message is plimsoll's report.");
  static PyObject* base = error;
  py::register_exception_translator([](std::exception_ptr thrown) {
    try {
      if (thrown) std::rethrow_exception(thrown);
    } catch (const OutOfMemory& e) {
      PyErr_SetString(out_of_memory, e.what());
    } catch (const InvalidArgument& e) {
      PyErr_SetString(invalid_argument, e.what());
    } catch (const DeviceUnavailable& e) {
      PyErr_SetString(device_unavailable, e.what());
    } catch (const InvalidState& e) {
      PyErr_SetString(invalid_state, e.what());
    } catch (const InvalidFree& e) {
      PyErr_SetString(invalid_free, e.what());
    } catch (const PauseError& e) {
      PyErr_SetString(pause_error, e.what());
    } catch (const Error& e) {
      PyErr_SetString(base, e.what());
    }
  });
}

void bind_reports(py::module_& m) {
  py::class_<PyRecording, std::shared_ptr<PyRecording>>(m, "Recording",
                                                         "A trace file being written (docs/recording.md).")
      .def("close", &PyRecording::close, "Ends the open step, names the call sites and closes the file.")
      .def("marker", [](PyRecording& self, const std::string& text) { self.recording->marker(text); }, py::arg("text"))
      .def_property_readonly("path", [](const PyRecording& self) { return self.recording->path(); })
      .def_property_readonly("events", [](const PyRecording& self) { return self.recording->events(); })
      .def_property_readonly("closed", [](const PyRecording& self) { return self.recording->closed(); })
      .def("_abandon", &PyRecording::abandon);
  m.def("open_recording", &open_recording, py::arg("path"), py::arg("devices"), py::arg("call_sites") = false,
        py::arg("buffer_bytes") = 0);
  m.def("leaks", &leaks, py::arg("path"), "The leak watch on a trace: what `plimsoll leaks --json` prints, as a dict.");
  m.def("replay", &replay, py::arg("trace"), py::arg("device") = "sim:16GiB", py::arg("policy") = py::none(),
        py::arg("memory_limit") = py::none(), "One replay of a trace: a line of `plimsoll replay --json`, as a dict.");
  m.def("estimate_batch", &estimate_batch, py::arg("shape"), py::arg("batch"), py::arg("dtype") = "float32",
        py::arg("queue") = 10, py::arg("workers") = 4, py::arg("budget") = py::none());
}

}  // namespace plimsoll::python
