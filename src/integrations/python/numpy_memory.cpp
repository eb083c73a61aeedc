// NumPy's data-memory handler (NEP 49) over a plimsoll device. NumPy stores the handler that made an array on the
// array and frees through it, so arrays made before install() keep going to NumPy's own handler; the free here
// still checks, since C extensions may free through the current handler, and passes pointers it does not own to
// the handler that was current before.
#define PY_ARRAY_UNIQUE_SYMBOL plimsoll_numpy_api
#define NPY_NO_DEPRECATED_API NPY_1_22_API_VERSION
#include "numpy_memory.hpp"

#include <Python.h>
#include <numpy/arrayobject.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <utility>

#include <fmt/format.h>

#include "plimsoll/allocator.hpp"
#include "plimsoll/error.hpp"
#include "plimsoll/oom.hpp"

namespace plimsoll::python {
namespace {

struct HandlerState {
  Allocator* device = nullptr;
  PyObject* previous = nullptr;  // capsule of the handler current before install (a strong reference)
  const PyDataMem_Handler* previous_handler = nullptr;
  // The size of each live block, for realloc (NEP 49 does not pass the old size) and to tell plimsoll's blocks
  // from others in free.
  std::mutex mutex;
  std::unordered_map<void*, std::pair<Allocator*, std::size_t>> live;
};

HandlerState& state() {
  static auto* handler_state = new HandlerState;  // never destroyed: arrays may be freed during interpreter exit
  return *handler_state;
}

thread_local Allocator* thread_device = nullptr;
thread_local Tag thread_tag = kUntagged;
thread_local std::string last_oom;

void* plimsoll_malloc(void* /*ctx*/, std::size_t size) {
  HandlerState& s = state();
  Allocator* device = thread_device != nullptr ? thread_device : s.device;
  try {
    void* ptr = device->allocate(size, thread_tag);
    const std::lock_guard lock(s.mutex);
    s.live[ptr] = {device, size};
    return ptr;
  } catch (const OutOfMemory& oom) {
    last_oom = oom.what();
  } catch (const std::exception& error) {
    last_oom = error.what();
  }
  return nullptr;
}

void* plimsoll_calloc(void* ctx, std::size_t elements, std::size_t element_size) {
  if (element_size != 0 && elements > SIZE_MAX / element_size) return nullptr;
  void* ptr = plimsoll_malloc(ctx, elements * element_size);
  // Fresh pages are zero, recycled blocks are not.
  if (ptr != nullptr) std::memset(ptr, 0, elements * element_size);
  return ptr;
}

// The previous handler's function for a pointer plimsoll did not make.
const PyDataMemAllocator& previous_allocator() { return state().previous_handler->allocator; }

void plimsoll_free(void* /*ctx*/, void* ptr, std::size_t size) {
  if (ptr == nullptr) return;
  HandlerState& s = state();
  Allocator* device = nullptr;
  {
    const std::lock_guard lock(s.mutex);
    if (const auto found = s.live.find(ptr); found != s.live.end()) {
      device = found->second.first;
      s.live.erase(found);
    }
  }
  if (device == nullptr) {
    const PyDataMemAllocator& previous = previous_allocator();
    previous.free(previous.ctx, ptr, size);
    return;
  }
  try {
    device->deallocate(ptr);
  } catch (const std::exception&) {
    // Cannot happen for a block from the table above; a C callback must not throw in any case.
  }
}

void* plimsoll_realloc(void* ctx, void* ptr, std::size_t new_size) {
  if (ptr == nullptr) return plimsoll_malloc(ctx, new_size);
  HandlerState& s = state();
  std::size_t old_size = 0;
  bool ours = false;
  {
    const std::lock_guard lock(s.mutex);
    if (const auto found = s.live.find(ptr); found != s.live.end()) {
      old_size = found->second.second;
      ours = true;
    }
  }
  if (!ours) {
    const PyDataMemAllocator& previous = previous_allocator();
    return previous.realloc(previous.ctx, ptr, new_size);
  }
  void* fresh = plimsoll_malloc(ctx, new_size);
  if (fresh == nullptr) return nullptr;  // the old block stays valid, as realloc promises
  std::memcpy(fresh, ptr, std::min(old_size, new_size));
  plimsoll_free(ctx, ptr, old_size);
  return fresh;
}

PyDataMem_Handler handler = {
    "plimsoll",
    1,
    {nullptr, plimsoll_malloc, plimsoll_calloc, plimsoll_realloc, plimsoll_free},
};

bool installed_flag = false;

void import_numpy_api() {
  static bool imported = false;
  if (imported) return;
  if (_import_array() < 0) {
    PyErr_Clear();
    throw InvalidState("NumPy's C API could not be loaded (is numpy installed for this interpreter?); the NumPy hook "
                       "is off");
  }
  // NEP 49 arrived in NumPy 1.22 (C API version 0x10): older NumPy has no PyDataMem_SetHandler.
  if (PyArray_GetNDArrayCFeatureVersion() < 0x00000010) {
    throw InvalidState(fmt::format("NumPy's C API is version {:#x}, older than NumPy 1.22 (0x10), which added the "
                                   "data-memory handler (NEP 49); the NumPy hook is off: upgrade NumPy to 1.22 or newer",
                                   PyArray_GetNDArrayCFeatureVersion()));
  }
  imported = true;
}


PyObject* handler_capsule() {
  static PyObject* capsule = PyCapsule_New(&handler, "mem_handler", nullptr);  // kept for good
  if (capsule == nullptr) throw InvalidState("could not make NumPy's handler capsule");
  return capsule;
}

}  // namespace

void install_numpy_in_this_thread() {
  if (!installed_flag) return;
  PyObject* previous = PyDataMem_SetHandler(handler_capsule());
  if (previous == nullptr) throw InvalidState("PyDataMem_SetHandler refused plimsoll's handler in this thread");
  Py_DECREF(previous);  // NumPy's default handler, kept alive by NumPy and by state().previous
}

void install_numpy(Allocator& device) {
  import_numpy_api();
  HandlerState& s = state();
  s.device = &device;
  if (installed_flag) return;
  PyObject* previous = PyDataMem_SetHandler(handler_capsule());
  if (previous == nullptr) {
    PyErr_Clear();
    throw InvalidState("PyDataMem_SetHandler refused plimsoll's handler; the NumPy hook is off");
  }
  if (s.previous == nullptr) {
    s.previous = previous;  // kept for good: its frees may come at any time
    s.previous_handler = static_cast<const PyDataMem_Handler*>(PyCapsule_GetPointer(previous, "mem_handler"));
  } else {
    Py_DECREF(previous);
  }
  installed_flag = true;
}

void uninstall_numpy() {
  if (!installed_flag) return;
  HandlerState& s = state();
  PyObject* ours = PyDataMem_SetHandler(s.previous);
  Py_XDECREF(ours);
  installed_flag = false;
}

bool numpy_installed() noexcept { return installed_flag; }

Allocator* set_thread_device(Allocator* device) noexcept { return std::exchange(thread_device, device); }

std::string set_thread_tag(std::string_view tag) {
  const Tag previous = std::exchange(thread_tag, tag.empty() ? kUntagged : intern_tag(tag));
  return previous == kUntagged ? std::string() : std::string(tag_name(previous));
}

std::string take_last_oom() { return std::exchange(last_oom, std::string()); }

}  // namespace plimsoll::python
