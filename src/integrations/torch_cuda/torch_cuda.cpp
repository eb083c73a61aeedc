// libplimsoll_torch_cuda.so: the ten C functions of include/plimsoll/torch_cuda.h (exports.map, checked by
// TorchCudaSo.ExportsOnlyTheAllocatorEntryPoints): the two torch.cuda.memory.CUDAPluggableAllocator loads (malloc and
// free), PyTorch's record_stream hook, and stats, empty_cache, reset_peak, pause, resume, is_paused, last_error
// (docs/pytorch.md).
// Each device's memory comes from Runtime::global().device("cuda:N"), configured by plimsoll's environment
// variables; stream order is the engine's (torch_device.hpp). No exception leaves this file: a failure prints
// plimsoll's message on stderr (failure_report.hpp) and malloc returns NULL, which PyTorch turns into its
// OutOfMemoryError.
#include "plimsoll/torch_cuda.h"

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "integrations/torch_cuda/failure_report.hpp"
#include "integrations/torch_cuda/torch_device.hpp"
#include "plimsoll/allocator.hpp"
#include "plimsoll/recording.hpp"
#include "plimsoll/runtime.hpp"
#include "plimsoll/stats.hpp"

#define PLIMSOLL_TORCH_CUDA_EXPORT __attribute__((visibility("default")))

namespace plimsoll::torch_cuda {
namespace {

struct DeviceState {
  Allocator* allocator = nullptr;
};

/// Process-wide state, never destroyed (like Runtime::global()): PyTorch frees tensors during interpreter
/// shutdown, after static destructors of this library may have run.
struct State {
  std::mutex mutex;  // guards everything below; held only to find or create a device, never while allocating
  // Invariant: a device's entry, once made, never changes or goes away (callers keep the pointer unlocked).
  std::map<int, DeviceState> devices;
  std::shared_ptr<Recording> recording;  // PLIMSOLL_TORCH_RECORD, opened with the first device
  std::set<std::string> said;            // messages already printed once
};

State& state() {
  static State* const instance = new State;
  return *instance;
}

/// Prints `message` on stderr the first time only (with the lock held).
void say_once_locked(State& s, const std::string& message) {
  if (s.said.insert(message).second) std::fprintf(stderr, "plimsoll: %s\n", message.c_str());
}

void close_recording() noexcept {
  try {
    State& s = state();
    std::shared_ptr<Recording> recording;
    {
      const std::lock_guard lock(s.mutex);
      recording = s.recording;
    }
    if (recording != nullptr) recording->close();  // later events are dropped, so late frees are harmless
  } catch (const std::exception& error) {
    std::fprintf(stderr, "plimsoll: PLIMSOLL_TORCH_RECORD: %s\n", error.what());
  } catch (...) {
  }
}

/// The device's state, created on first use; nullptr (after saying why, once) when it cannot be.
DeviceState* device_state(int device) noexcept {
  State& s = state();
  try {
    const std::lock_guard lock(s.mutex);
    if (const auto found = s.devices.find(device); found != s.devices.end()) return &found->second;
    try {
      Allocator& allocator = Runtime::global().device(fmt::format("cuda:{}", device));
      if (allocator.description().name.rfind("cuda:", 0) != 0) {
        // PLIMSOLL_CPU_FALLBACK gave host memory: PyTorch would launch kernels on it. Refuse instead.
        say_once_locked(s, fmt::format("cuda:{} fell back to {} (PLIMSOLL_CPU_FALLBACK), which PyTorch cannot use "
                                       "as CUDA memory (libplimsoll_torch_cuda: returning NULL to PyTorch for "
                                       "cuda:{}); unset PLIMSOLL_CPU_FALLBACK",
                                       device, allocator.description().name, device));
        return nullptr;
      }
      if (!allocator.stream_ordered()) {
        // Without events a freed block would be handed to another stream while kernels may still use it.
        say_once_locked(s, fmt::format("cuda:{}: the CUDA driver lacks cuEventCreate/cuEventRecord/cuEventQuery, "
                                       "which stream-ordered reuse needs (libplimsoll_torch_cuda: returning NULL "
                                       "to PyTorch for cuda:{}); update the driver",
                                       device, device));
        return nullptr;
      }
      if (const char* path = std::getenv("PLIMSOLL_TORCH_RECORD"); path != nullptr && *path != '\0') {
        if (s.recording == nullptr) {
          s.recording = Recording::open(path);
          std::atexit(close_recording);
        }
        allocator.record_to(s.recording);
      }
      DeviceState created;
      created.allocator = &allocator;
      return &s.devices.emplace(device, std::move(created)).first->second;
    } catch (const std::exception& error) {
      say_once_locked(s, fmt::format("{} (libplimsoll_torch_cuda: returning NULL to PyTorch for cuda:{}, which "
                                     "raises its OutOfMemoryError; PLIMSOLL_CPU_FALLBACK does not apply here)",
                                     error.what(), device));
    }
  } catch (...) {
    // bad_alloc while building a message, or a lock failure: nothing more can be said.
  }
  return nullptr;
}

}  // namespace
}  // namespace plimsoll::torch_cuda

using plimsoll::torch_cuda::DeviceState;
using plimsoll::torch_cuda::device_state;

extern "C" PLIMSOLL_TORCH_CUDA_EXPORT void* plimsoll_torch_malloc(ssize_t size, int device,
                                                                   plimsoll_cuda_stream stream) {
  if (size < 0) return nullptr;
  DeviceState* state = device_state(device);
  if (state == nullptr) return nullptr;
  std::string why;
  void* ptr = plimsoll::torch_cuda::torch_malloc(*state->allocator, static_cast<std::size_t>(size), stream, why);
  if (ptr == nullptr) plimsoll::torch_cuda::say(why, device, "out of memory on");
  return ptr;
}

extern "C" PLIMSOLL_TORCH_CUDA_EXPORT void plimsoll_torch_free(void* ptr, ssize_t /*size*/, int device,
                                                                plimsoll_cuda_stream stream) {
  if (ptr == nullptr) return;
  DeviceState* state = device_state(device);
  if (state == nullptr) return;  // nothing was ever allocated there
  std::string why;
  if (!plimsoll::torch_cuda::torch_free(*state->allocator, ptr, stream, why))
    plimsoll::torch_cuda::say(why, device, "a free failed (out of host memory for its reason) on");
}

namespace plimsoll::torch_cuda {
namespace {
/// The device's state if the library already created it; nullptr otherwise (the calls below never create one).
DeviceState* existing_device(int device) {
  State& s = state();
  const std::lock_guard lock(s.mutex);
  const auto found = s.devices.find(device);
  return found == s.devices.end() ? nullptr : &found->second;
}

/// The device whose allocation `ptr` is (PyTorch's record_stream hook passes no device); nullptr when none.
DeviceState* device_owning(const void* ptr) {
  State& s = state();
  const std::lock_guard lock(s.mutex);
  for (auto& [device, entry] : s.devices)
    if (entry.allocator->owns(ptr)) return &entry;
  return nullptr;
}
}  // namespace
}  // namespace plimsoll::torch_cuda

extern "C" PLIMSOLL_TORCH_CUDA_EXPORT const char* plimsoll_torch_cuda_stats_json(int device) {
  try {
    DeviceState* state = plimsoll::torch_cuda::existing_device(device);
    if (state == nullptr) return nullptr;
    thread_local std::string json;
    json = plimsoll::torch_cuda::stats_json(*state->allocator, device);
    return json.c_str();
  } catch (...) {
    return nullptr;
  }
}

extern "C" PLIMSOLL_TORCH_CUDA_EXPORT long long plimsoll_torch_cuda_empty_cache(int device) {
  try {
    DeviceState* state = plimsoll::torch_cuda::existing_device(device);
    if (state == nullptr) return -1;
    return static_cast<long long>(plimsoll::torch_cuda::empty_cache(*state->allocator));
  } catch (...) {
    return -1;
  }
}

extern "C" PLIMSOLL_TORCH_CUDA_EXPORT int plimsoll_torch_cuda_reset_peak(int device) {
  try {
    DeviceState* state = plimsoll::torch_cuda::existing_device(device);
    if (state == nullptr) return -1;
    state->allocator->reset_peaks();
    return 0;
  } catch (...) {
    return -1;
  }
}

using plimsoll::torch_cuda::say;
using plimsoll::torch_cuda::say_unexpected;

extern "C" PLIMSOLL_TORCH_CUDA_EXPORT long long plimsoll_torch_cuda_pause(int device, int keep_contents) {
  try {
    DeviceState* state = plimsoll::torch_cuda::existing_device(device);
    if (state == nullptr) {
      say("cannot pause cuda:" + std::to_string(device) + ": plimsoll never allocated on it in this process",
          "cannot pause: plimsoll never allocated on that device in this process");
      return -1;
    }
    std::string why;
    const long long given_back = plimsoll::torch_cuda::pause(*state->allocator, keep_contents != 0, why);
    if (given_back < 0) say(why, "pause failed (out of host memory for its reason)");
    return given_back;
  } catch (...) {
    say_unexpected("pause", device);
    return -1;
  }
}

extern "C" PLIMSOLL_TORCH_CUDA_EXPORT int plimsoll_torch_cuda_resume(int device) {
  try {
    DeviceState* state = plimsoll::torch_cuda::existing_device(device);
    if (state == nullptr) {
      say("cannot resume cuda:" + std::to_string(device) + ": plimsoll never allocated on it in this process",
          "cannot resume: plimsoll never allocated on that device in this process");
      return -1;
    }
    std::string why;
    if (plimsoll::torch_cuda::resume(*state->allocator, why)) return 0;
    say(why, "resume failed (out of host memory for its reason); the device stays paused");
    return -1;
  } catch (...) {
    say_unexpected("resume", device);
    return -1;
  }
}

extern "C" PLIMSOLL_TORCH_CUDA_EXPORT int plimsoll_torch_cuda_is_paused(int device) {
  try {
    DeviceState* state = plimsoll::torch_cuda::existing_device(device);
    return state == nullptr ? -1 : state->allocator->paused() ? 1 : 0;
  } catch (...) {
    say_unexpected("query", device);
    return -1;
  }
}

extern "C" PLIMSOLL_TORCH_CUDA_EXPORT const char* plimsoll_torch_cuda_last_error(void) {
  return plimsoll::torch_cuda::last_error();
}

// PyTorch calls record_stream from C++ that expects no failure: nothing is thrown across, the engine keeps the
// block safe out of host memory (its free then waits for the device), and what is left is a return value.
extern "C" PLIMSOLL_TORCH_CUDA_EXPORT int plimsoll_torch_record_stream(void* ptr, int device,
                                                                       plimsoll_cuda_stream stream) {
  if (ptr == nullptr) return 0;  // an empty tensor's (PyTorch passes its null pointer on): nothing to order
  try {
    DeviceState* state = device < 0 ? plimsoll::torch_cuda::device_owning(ptr)
                                    : plimsoll::torch_cuda::existing_device(device);
    if (state == nullptr) {
      say(device < 0 ? "cannot record_stream: no device of plimsoll's holds a live allocation at that pointer; pass a "
                       "pointer plimsoll_torch_malloc returned, before freeing it"
                     : "cannot record_stream on cuda:" + std::to_string(device) +
                           ": plimsoll never allocated on it in this process; pass the device plimsoll_torch_malloc "
                           "allocated on, or -1 to find it",
          "cannot record_stream: no live block of plimsoll's at that pointer on that device");
      return -1;
    }
    std::string why;
    if (plimsoll::torch_cuda::torch_record_stream(*state->allocator, ptr, stream, why)) return 0;
    say(why, "record_stream failed (out of host memory for its reason); synchronize the stream before freeing the "
             "block");
    return -1;
  } catch (...) {
    say_unexpected("record_stream on", device);
    return -1;
  }
}
