// Devices, stats, policies, NumPy's handler, scopes, steps and Python call sites, for `_plimsoll`.
#include <pybind11/stl.h>

#include <optional>
#include <string>

#include "bindings.hpp"
#include "numpy_memory.hpp"
#include "plimsoll/error.hpp"
#include "plimsoll/oom.hpp"
#include "plimsoll/recording.hpp"
#include "plimsoll/runtime.hpp"
#include "plimsoll/size.hpp"
#include "python_sites.hpp"

namespace py = pybind11;

namespace plimsoll::python {
namespace {

py::dict stats_dict(Allocator& device) {
  const Stats stats = device.stats();
  py::dict out;
  out["device"] = device.description().name;
  out["in_use_bytes"] = stats.in_use_bytes;
  out["requested_bytes"] = stats.requested_bytes;
  out["peak_in_use_bytes"] = stats.peak_in_use_bytes;
  out["reserved_bytes"] = stats.reserved_bytes;
  out["peak_reserved_bytes"] = stats.peak_reserved_bytes;
  out["largest_free_block"] = stats.largest_free_block;
  out["limit_bytes"] = stats.limit_bytes;
  out["allocations"] = stats.allocations;
  out["frees"] = stats.frees;
  out["ooms"] = stats.ooms;
  out["maps"] = stats.maps;
  out["unmaps"] = stats.unmaps;
  out["live_allocations"] = stats.live_allocations;
  out["parked_bytes"] = stats.parked_bytes;
  out["stream_fallbacks"] = stats.stream_fallbacks;
  out["unrecorded_streams"] = stats.unrecorded_streams;
  out["address_space_bytes"] = stats.address_space_bytes;
  out["committed_bytes"] = stats.committed_bytes;
  out["resident_bytes"] = stats.resident_bytes;
  py::list tags;
  for (const TagStats& tag : stats.tags) {
    py::dict entry;
    entry["tag"] = tag.tag;
    entry["in_use_bytes"] = tag.in_use_bytes;
    entry["peak_in_use_bytes"] = tag.peak_in_use_bytes;
    entry["allocations"] = tag.allocations;
    tags.append(std::move(entry));
  }
  out["tags"] = std::move(tags);
  // The run plan (Allocator::set_run_plan; PLIMSOLL_RUN_PLAN or the device's run_plan key): what it placed, and
  // where and why it ended ("none": still active, or no plan).
  py::dict run_plan;
  run_plan["loaded"] = stats.run_plan.loaded;
  run_plan["entries"] = stats.run_plan.entries;
  run_plan["placed"] = stats.run_plan.placed;
  run_plan["made_room"] = stats.run_plan.made_room;
  run_plan["unparked"] = stats.run_plan.unparked;
  run_plan["mapped_ahead"] = stats.run_plan.mapped_ahead;
  run_plan["ended_at"] = stats.run_plan.ended_at;
  run_plan["ended_by"] = std::string(to_string(stats.run_plan.ended_by));
  out["run_plan"] = std::move(run_plan);
  return out;
}

py::list device_list() {
  py::list out;
  for (const DeviceListing& listing : Runtime::global().list_devices()) {
    py::dict entry;
    entry["name"] = listing.name;
    entry["hardware"] = listing.hardware;
    entry["total_bytes"] = listing.total_bytes;
    entry["free_bytes"] = listing.free_bytes;
    entry["limit_bytes"] = listing.limit_bytes;
    entry["policy"] = std::string(to_string(listing.policy.growth));
    entry["details"] = listing.details;
    out.append(std::move(entry));
  }
  return out;
}

// A size given as bytes (int) or as text ("4GiB").
std::optional<std::uint64_t> size_of(const py::object& value) {
  if (value.is_none()) return std::nullopt;
  if (py::isinstance<py::str>(value)) return parse_size(value.cast<std::string>());
  const auto bytes = value.cast<long long>();
  if (bytes < 0) throw InvalidArgument("a size cannot be negative; pass bytes (an int >= 0) or text such as \"4GiB\"");
  return static_cast<std::uint64_t>(bytes);
}

void configure(const std::string& device, const py::object& memory_limit, const py::object& memory_fraction,
               const py::object& growth, const py::object& reserve, const py::object& release_threshold,
               const py::object& thread_cache) {
  Policy policy = Runtime::global().policy_for(device);
  if (const auto limit = size_of(memory_limit)) {
    policy.memory_limit = limit;
    policy.memory_fraction.reset();
  }
  if (!memory_fraction.is_none()) {
    policy.memory_fraction = memory_fraction.cast<double>();
    policy.memory_limit.reset();
  }
  if (!growth.is_none()) policy.growth = parse_growth(growth.cast<std::string>());
  if (const auto bytes = size_of(reserve)) policy.reserve = bytes;
  if (const auto bytes = size_of(release_threshold)) policy.release_threshold = bytes;
  if (const auto bytes = size_of(thread_cache)) policy.thread_cache = bytes;
  policy.validate();
  Runtime::global().configure(device, policy);
}

}  // namespace

void bind_devices(py::module_& m) {
  m.def("devices", &device_list, "Every visible device as a dict (name, hardware, total/free/limit bytes, policy).");
  m.def("stats", [](const std::string& device) { return stats_dict(Runtime::global().device(device)); },
        py::arg("device") = "cpu", "The device's counters as a dict (creates the device on first use).");
  m.def("device_name", [](const std::string& device) { return Runtime::global().device(device).description().name; },
        py::arg("device"), "The canonical name of a device (creates it on first use).");
  m.def("device_summary", [](const std::string& device) { return Runtime::global().device(device).description().summary(); },
        py::arg("device"));
  m.def("trim", [](const std::string& device) { return Runtime::global().device(device).trim(); },
        py::arg("device") = "cpu", "Returns the device's cached free memory to the system; returns the bytes.");
  m.def("pause",
        [](const std::string& device, bool keep_contents) {
          return Runtime::global().device(device).pause(PauseOptions{.keep_contents = keep_contents});
        },
        py::arg("device"), py::kw_only(), py::arg("keep_contents") = false, py::call_guard<py::gil_scoped_release>(),
        "Gives the device's memory back keeping every address (docs/engine.md, \"Pause and resume\"); returns the "
        "bytes given back. keep_contents copies the live bytes to host memory first.");
  m.def("resume", [](const std::string& device) { Runtime::global().device(device).resume(); }, py::arg("device"),
        py::call_guard<py::gil_scoped_release>(), "Maps a paused device's memory back at the same addresses.");
  m.def("paused", [](const std::string& device) { return Runtime::global().device(device).paused(); },
        py::arg("device"), "Whether the device is paused.");
  m.def("configure", &configure, py::arg("device"), py::kw_only(), py::arg("memory_limit") = py::none(),
        py::arg("memory_fraction") = py::none(), py::arg("growth") = py::none(), py::arg("reserve") = py::none(),
        py::arg("release_threshold") = py::none(), py::arg("thread_cache") = py::none(),
        "Changes the policy of a device before its first allocation (sizes as bytes or text such as \"4GiB\").");
  m.def("parse_size", [](const std::string& text) { return parse_size(text); }, py::arg("text"));
  m.def("format_size", [](std::uint64_t bytes) { return format_size(bytes); }, py::arg("bytes"));

  m.def("install_numpy", [](const std::string& device) { install_numpy(Runtime::global().device(device)); },
        py::arg("device") = "cpu");
  m.def("uninstall_numpy", &uninstall_numpy);
  m.def("install_numpy_in_this_thread", &install_numpy_in_this_thread);
  m.def("numpy_installed", &numpy_installed);
  m.def("take_last_oom", &take_last_oom);
  // Scopes for NumPy's data: the previous value comes back, for the context manager's exit.
  m.def("_set_thread_device", [](const std::optional<std::string>& device) -> std::optional<std::string> {
    Allocator* previous = set_thread_device(device ? &Runtime::global().device(*device) : nullptr);
    if (previous == nullptr) return std::nullopt;
    return previous->description().name;
  });
  m.def("_set_thread_tag", [](const std::string& tag) { return set_thread_tag(tag); });

  m.def("step", &plimsoll::step,
        "Marks a training-step boundary in every open recording: ends step N and begins step N+1.");
  m.def("current_step", &plimsoll::current_step, "The number of the step step() last began (0 before the first).");
  m.def("python_sites_supported", &python_sites_supported);
  m.def("enable_python_sites", &enable_python_sites, py::arg("on") = true,
        "Names call sites of recordings with call sites by the allocating thread's innermost Python frame.");
}

}  // namespace plimsoll::python
