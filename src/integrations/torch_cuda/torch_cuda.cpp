// libplimsoll_torch_cuda.so: the two C functions torch.cuda.memory.CUDAPluggableAllocator loads (docs/pytorch.md).
// Each device's memory comes from Runtime::global().device("cuda:N"), configured by plimsoll's environment
// variables, through a per-device StreamOrderedFrees. No exception leaves this file: a failure prints
// plimsoll's message on stderr and malloc returns NULL, which PyTorch turns into its OutOfMemoryError.
#include "plimsoll/torch_cuda.h"

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "devices/cuda_driver.hpp"
#include "integrations/torch_cuda/stream_ordered_frees.hpp"
#include "plimsoll/allocator.hpp"
#include "plimsoll/recording.hpp"
#include "plimsoll/runtime.hpp"
#include "plimsoll/stats.hpp"

#define PLIMSOLL_TORCH_CUDA_EXPORT __attribute__((visibility("default")))

namespace plimsoll::torch_cuda {
namespace {

namespace cu = cuda_driver;

struct DeviceState {
  Allocator* allocator = nullptr;
  std::unique_ptr<StreamOrderedFrees> frees;
};

/// Process-wide state, never destroyed (like Runtime::global()): PyTorch frees tensors during interpreter
/// shutdown, after static destructors of this library may have run.
struct State {
  std::mutex mutex;  // guards everything below; held only to find or create a device, never while allocating
  // Invariant: a device's entry, once made, never changes or goes away (callers keep the pointer unlocked).
  std::map<int, DeviceState> devices;
  std::optional<cu::Api> api;  // loaded on the first device's creation
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

/// Prints `text` on stderr, prefixed with "plimsoll: " unless it already is (the OOM report); `device`'s out
/// of memory when `text` is empty.
void say(std::string text, int device) noexcept {
  try {
    if (text.empty()) text = fmt::format("out of memory on cuda:{}", device);
    if (text.rfind("plimsoll:", 0) != 0) text.insert(0, "plimsoll: ");
    if (text.empty() || text.back() != '\n') text += '\n';
    std::fputs(text.c_str(), stderr);
  } catch (...) {
  }
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
      if (!s.api) {
        std::string why;
        s.api = cu::load(why);
        if (!s.api) {
          say_once_locked(s, "cannot load the CUDA driver for stream-ordered frees: " + why);
          return nullptr;
        }
        if (!s.api->has_events()) {
          s.api.reset();
          say_once_locked(s, "the CUDA driver lacks cuEventCreate/cuEventRecord/cuEventQuery; update the driver");
          return nullptr;
        }
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
      created.frees = std::make_unique<StreamOrderedFrees>(allocator, *s.api);
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
  void* ptr = state->frees->allocate(static_cast<std::size_t>(size),
                                     static_cast<plimsoll::cuda_driver::Stream>(stream), &why);
  if (ptr == nullptr) plimsoll::torch_cuda::say(std::move(why), device);
  return ptr;
}

extern "C" PLIMSOLL_TORCH_CUDA_EXPORT void plimsoll_torch_free(void* ptr, ssize_t /*size*/, int device,
                                                                plimsoll_cuda_stream stream) {
  if (ptr == nullptr) return;
  DeviceState* state = device_state(device);
  if (state == nullptr) return;  // nothing was ever allocated there
  std::string why;
  state->frees->deallocate(ptr, static_cast<plimsoll::cuda_driver::Stream>(stream), &why);
  if (!why.empty()) plimsoll::torch_cuda::say(std::move(why), device);
}

extern "C" PLIMSOLL_TORCH_CUDA_EXPORT const char* plimsoll_torch_cuda_stats_json(int device) {
  try {
    plimsoll::torch_cuda::State& s = plimsoll::torch_cuda::state();
    DeviceState* state = nullptr;
    {
      const std::lock_guard lock(s.mutex);
      const auto found = s.devices.find(device);
      if (found == s.devices.end()) return nullptr;
      state = &found->second;
    }
    const plimsoll::Stats stats = state->allocator->stats();
    thread_local std::string json;
    json = fmt::format(
        "{{\"device\":\"cuda:{}\",\"in_use_bytes\":{},\"peak_in_use_bytes\":{},\"reserved_bytes\":{},"
        "\"peak_reserved_bytes\":{},\"limit_bytes\":{},\"allocations\":{},\"frees\":{},\"ooms\":{},"
        "\"live_allocations\":{},\"parked_frees\":{},\"events\":{}}}",
        device, stats.in_use_bytes, stats.peak_in_use_bytes, stats.reserved_bytes, stats.peak_reserved_bytes,
        stats.limit_bytes, stats.allocations, stats.frees, stats.ooms, stats.live_allocations,
        state->frees->parked(), state->frees->events_created());
    return json.c_str();
  } catch (...) {
    return nullptr;
  }
}
