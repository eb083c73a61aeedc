// A fake CUDA driver built as a real libcuda.so.1, for tests on machines without a GPU: programs link it, dlopen it
// or reach it through cuGetProcAddress exactly as they would the real one, and libplimsoll_cuda_intercept.so is
// preloaded in front of it as on a GPU. Memory is host memory (malloc, never touched by the fake); the GPU's capacity and each
// process's holdings live in fake_device_state.hpp's shared file, so several processes share one fake GPU and a
// dead process's memory is freed, as the real driver does.
//
// Environment: PLIMSOLL_FAKE_CUDA_BYTES (the GPU's memory, default 1GiB), PLIMSOLL_FAKE_CUDA_CONTEXT_BYTES (what a
// context costs, default 0), PLIMSOLL_FAKE_CUDA_STATE (the shared state file; unset: this process alone),
// PLIMSOLL_FAKE_CUDA_UUID (16 bytes as 32 hex digits; default fa...fa), PLIMSOLL_FAKE_CUDA_CONTEXT_DELAY_MS (how long
// a context takes to create once its memory is taken, default 0).
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <string_view>
#include <unordered_map>

#include "fake_cuda_errors.hpp"
#include "fake_device_state.hpp"
#include "plimsoll/size.hpp"
#include "sharing/process_identity.hpp"

namespace {

namespace cu = plimsoll::cuda_driver;
namespace fake = plimsoll::fake_cuda;
using plimsoll::sharing::ProcessIdentity;

// The driver's types, as plimsoll's callers (devices/cuda_driver.hpp, the interposer, the client) spell them, so
// that every entry point below has the type its callers call it with (UBSan's -fsanitize=function checks it).
using CUresult = cu::Result;
using CUdevice = cu::Device;
using CUdeviceptr = cu::DevicePtr;
using CUcontext = cu::Context;
using CUstream = cu::Stream;
using CUmemoryPool = cu::MemPool;
using CUmemGenericAllocationHandle = cu::MemHandle;

}  // namespace

// The opaque handles, which the driver defines: the fake's one context and its pools.
struct CUctx_st {
  int device = 0;
};
struct CUmemPoolHandle_st {
  int device = 0;
};

namespace {

enum class Kind { plain, managed, pitched, stream_ordered, physical };

struct Allocation {
  std::uint64_t bytes = 0;
  Kind kind = Kind::plain;
};

std::uint64_t environment_size(const char* name, std::uint64_t fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  try {
    return plimsoll::parse_size(text);
  } catch (...) {
    return fallback;
  }
}

// The fake GPU: the shared state, this process's slot in it, and this process's allocations.
class Gpu {
 public:
  static Gpu& get() {
    static Gpu* gpu = new Gpu;  // never destroyed: calls may come from other libraries' destructors
    return *gpu;
  }

  CUresult allocate(std::uint64_t bytes, Kind kind, std::uintptr_t& address) {
    if (bytes == 0) return cu::kErrorInvalidValue;
    // Host memory stands for device memory, 256-byte aligned as cuMemAlloc promises. malloc keeps small
    // allocations cheap (the interposer's overhead is measured against this driver) and maps large ones lazily.
    void* memory = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
    if (memory == nullptr) return cu::kErrorOutOfMemory;
    if (!charge(bytes)) {
      std::free(memory);
      return cu::kErrorOutOfMemory;
    }
    address = reinterpret_cast<std::uintptr_t>(memory);
    const std::lock_guard lock(table_mutex_);
    table_[address] = Allocation{.bytes = bytes, .kind = kind};
    return cu::kSuccess;
  }

  CUresult free(std::uintptr_t address, bool physical) {
    Allocation allocation;
    {
      const std::lock_guard lock(table_mutex_);
      const auto found = table_.find(address);
      if (found == table_.end() || (found->second.kind == Kind::physical) != physical)
        return physical ? fake::kErrorInvalidHandle : cu::kErrorInvalidValue;
      allocation = found->second;
      table_.erase(found);
    }
    std::free(reinterpret_cast<void*>(address));
    credit(allocation.bytes);
    return cu::kSuccess;
  }

  /// Charged once per process, with the first context (as the real driver does when it creates one).
  CUresult create_context() {
    const std::lock_guard lock(context_mutex_);
    if (has_context_) return cu::kSuccess;
    const std::uint64_t cost = environment_size("PLIMSOLL_FAKE_CUDA_CONTEXT_BYTES", 0);
    if (cost > 0 && !charge(cost)) return cu::kErrorOutOfMemory;
    // A real context takes hundreds of ms to create after its memory is taken: long enough for another process
    // to see it in cuMemGetInfo. PLIMSOLL_FAKE_CUDA_CONTEXT_DELAY_MS makes that window as wide.
    if (const char* delay = std::getenv("PLIMSOLL_FAKE_CUDA_CONTEXT_DELAY_MS"); delay != nullptr)
      std::this_thread::sleep_for(std::chrono::milliseconds(std::strtoul(delay, nullptr, 10)));
    has_context_ = true;
    return cu::kSuccess;
  }
  bool has_context() const {
    const std::lock_guard lock(context_mutex_);
    return has_context_;
  }

  std::uint64_t capacity() const { return state_->capacity.load(); }
  std::uint64_t used() {
    const Guard guard(*this);
    reclaim_dead();  // what a dead process held is free, as on the real driver once it tore the process down
    return sum_used();
  }
  const unsigned char* uuid() const { return uuid_; }

 private:
  class Guard {  // the state's lock: flock on the shared file, a mutex in-process
   public:
    explicit Guard(Gpu& gpu) : gpu_(gpu) {
      gpu_.local_mutex_.lock();
      if (gpu_.fd_ >= 0) ::flock(gpu_.fd_, LOCK_EX);
    }
    ~Guard() {
      if (gpu_.fd_ >= 0) ::flock(gpu_.fd_, LOCK_UN);
      gpu_.local_mutex_.unlock();
    }
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;

   private:
    Gpu& gpu_;
  };

  Gpu() {
    const std::uint64_t capacity = environment_size("PLIMSOLL_FAKE_CUDA_BYTES", std::uint64_t{1} << 30);
    const char* path = std::getenv("PLIMSOLL_FAKE_CUDA_STATE");
    void* memory = nullptr;
    if (path != nullptr && *path != '\0') {
      fd_ = ::open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
      if (fd_ < 0 || ::flock(fd_, LOCK_EX) != 0) std::abort();
      struct stat info {};
      if (::fstat(fd_, &info) != 0) std::abort();
      if (static_cast<std::size_t>(info.st_size) < sizeof(fake::DeviceState) &&
          ::ftruncate(fd_, sizeof(fake::DeviceState)) != 0)
        std::abort();
      memory = ::mmap(nullptr, sizeof(fake::DeviceState), PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
      if (memory == MAP_FAILED) std::abort();
      state_ = static_cast<fake::DeviceState*>(memory);
      if (state_->magic.load() != fake::kStateMagic) {
        state_->capacity.store(capacity);
        state_->magic.store(fake::kStateMagic);
      }
      ::flock(fd_, LOCK_UN);
    } else {
      state_ = new fake::DeviceState{};
      state_->capacity.store(capacity);
      state_->magic.store(fake::kStateMagic);
    }
    me_ = plimsoll::sharing::this_process();
    std::memset(uuid_, 0xfa, sizeof uuid_);
    if (const char* hex = std::getenv("PLIMSOLL_FAKE_CUDA_UUID"); hex != nullptr && std::strlen(hex) == 32) {
      for (int i = 0; i < 16; ++i) {
        const char pair[3] = {hex[2 * i], hex[2 * i + 1], 0};
        uuid_[i] = static_cast<unsigned char>(std::strtoul(pair, nullptr, 16));
      }
    }
  }

  fake::ProcessSlot& my_slot() {  // with the guard held
    if (slot_ != nullptr) return *slot_;
    for (fake::ProcessSlot& slot : state_->slots) {
      const int pid = slot.pid.load();
      const bool dead = pid != 0 && !plimsoll::sharing::is_running({.pid = pid, .start_time = slot.start_time.load()});
      if (pid == 0 || dead) {
        if (dead) state_->reclaimed.fetch_add(1);
        slot.bytes.store(0);
        slot.start_time.store(me_.start_time);
        slot.pid.store(me_.pid);
        slot_ = &slot;
        return slot;
      }
    }
    std::abort();  // more processes than the fake GPU has slots for
  }

  std::uint64_t sum_used() const {
    std::uint64_t used = 0;
    for (const fake::ProcessSlot& slot : state_->slots)
      if (slot.pid.load() != 0) used += slot.bytes.load();
    return used;
  }

  // The driver frees a dead process's memory: its slot stops counting.
  void reclaim_dead() {
    for (fake::ProcessSlot& slot : state_->slots) {
      const int pid = slot.pid.load();
      if (pid == 0 || &slot == slot_) continue;
      if (plimsoll::sharing::is_running({.pid = pid, .start_time = slot.start_time.load()})) continue;
      slot.pid.store(0);
      slot.bytes.store(0);
      state_->reclaimed.fetch_add(1);
    }
  }

  bool charge(std::uint64_t bytes) {
    const Guard guard(*this);
    fake::ProcessSlot& slot = my_slot();
    const std::uint64_t capacity = state_->capacity.load();
    std::uint64_t used = sum_used();
    if (used + bytes > capacity) {
      reclaim_dead();
      used = sum_used();
    }
    if (used + bytes > capacity) {
      state_->refusals.fetch_add(1);
      return false;
    }
    slot.bytes.fetch_add(bytes);
    if (used + bytes > state_->peak_used.load()) state_->peak_used.store(used + bytes);
    state_->allocations.fetch_add(1);
    return true;
  }

  void credit(std::uint64_t bytes) {
    const Guard guard(*this);
    my_slot().bytes.fetch_sub(bytes);
  }

  int fd_ = -1;
  fake::DeviceState* state_ = nullptr;
  fake::ProcessSlot* slot_ = nullptr;
  ProcessIdentity me_;
  unsigned char uuid_[16] = {};
  std::mutex local_mutex_;
  mutable std::mutex context_mutex_;
  bool has_context_ = false;
  std::mutex table_mutex_;
  std::unordered_map<std::uintptr_t, Allocation> table_;
};

std::atomic<bool> initialized{false};
CUctx_st the_context;
thread_local CUcontext current_context = nullptr;
std::atomic<CUmemGenericAllocationHandle> next_handle{0x1000};
std::mutex handles_mutex;
std::unordered_map<CUmemGenericAllocationHandle, std::uintptr_t> handles;  // handle -> backing address
CUmemPoolHandle_st default_pool;

CUresult needs_context() {
  if (!initialized.load()) return fake::kErrorNotInitialized;
  return Gpu::get().has_context() ? cu::kSuccess : fake::kErrorInvalidContext;
}

CUresult allocate_into(CUdeviceptr* pointer, std::size_t bytes, Kind kind) {
  if (const CUresult status = needs_context(); status != cu::kSuccess) return status;
  if (pointer == nullptr) return cu::kErrorInvalidValue;
  std::uintptr_t address = 0;
  const CUresult status = Gpu::get().allocate(bytes, kind, address);
  if (status == cu::kSuccess) *pointer = address;
  return status;
}

}  // namespace

extern "C" {

// ---- initialization and devices ----

__attribute__((visibility("default"))) CUresult cuInit(unsigned int flags) {
  if (flags != 0) return cu::kErrorInvalidValue;
  initialized.store(true);
  return cu::kSuccess;
}
__attribute__((visibility("default"))) CUresult cuDriverGetVersion(int* version) {
  if (version == nullptr) return cu::kErrorInvalidValue;
  *version = 13000;
  return cu::kSuccess;
}
__attribute__((visibility("default"))) CUresult cuDeviceGetCount(int* count) {
  if (!initialized.load()) return fake::kErrorNotInitialized;
  *count = 1;
  return cu::kSuccess;
}
__attribute__((visibility("default"))) CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  if (!initialized.load()) return fake::kErrorNotInitialized;
  if (ordinal != 0) return fake::kErrorInvalidDevice;
  *device = 0;
  return cu::kSuccess;
}
__attribute__((visibility("default"))) CUresult cuDeviceGetName(char* name, int length, CUdevice device) {
  if (device != 0) return fake::kErrorInvalidDevice;
  if (name == nullptr || length <= 0) return cu::kErrorInvalidValue;
  std::strncpy(name, "Fake GPU (libcuda.so.1 for tests)", static_cast<std::size_t>(length));
  name[length - 1] = '\0';
  return cu::kSuccess;
}
__attribute__((visibility("default"))) CUresult cuDeviceGetUuid(cu::Uuid* uuid, CUdevice device) {
  if (device != 0) return fake::kErrorInvalidDevice;
  std::memcpy(uuid->bytes, Gpu::get().uuid(), 16);
  return cu::kSuccess;
}
__attribute__((visibility("default"))) CUresult cuDeviceGetUuid_v2(cu::Uuid* uuid, CUdevice device) {
  return cuDeviceGetUuid(uuid, device);
}
__attribute__((visibility("default"))) CUresult cuDeviceTotalMem_v2(std::size_t* bytes, CUdevice device) {
  if (!initialized.load()) return fake::kErrorNotInitialized;
  if (device != 0) return fake::kErrorInvalidDevice;
  *bytes = Gpu::get().capacity();
  return cu::kSuccess;
}
__attribute__((visibility("default"))) CUresult cuDeviceGetAttribute(int* value, int attribute, CUdevice device) {
  if (device != 0) return fake::kErrorInvalidDevice;
  if (attribute == cu::kAttributeComputeCapabilityMajor) *value = 9;
  else if (attribute == cu::kAttributeComputeCapabilityMinor) *value = 0;
  else if (attribute == cu::kAttributeVirtualMemoryManagementSupported) *value = 1;
  else *value = 0;
  return cu::kSuccess;
}
__attribute__((visibility("default"))) CUresult cuDeviceGetPCIBusId(char* bus_id, int length, CUdevice device) {
  if (device != 0) return fake::kErrorInvalidDevice;
  std::strncpy(bus_id, "0000:00:00.0", static_cast<std::size_t>(length));
  return cu::kSuccess;
}
__attribute__((visibility("default"))) CUresult cuGetErrorName(CUresult error, const char** name) {
  *name = fake::error_name(error);
  return *name != nullptr ? cu::kSuccess : cu::kErrorInvalidValue;
}
__attribute__((visibility("default"))) CUresult cuGetErrorString(CUresult error, const char** text) {
  return cuGetErrorName(error, text);
}

// ---- contexts: one per process, the first costs PLIMSOLL_FAKE_CUDA_CONTEXT_BYTES ----

__attribute__((visibility("default"))) CUresult cuCtxCreate_v2(CUcontext* context, unsigned int, CUdevice device) {
  if (!initialized.load()) return fake::kErrorNotInitialized;
  if (device != 0) return fake::kErrorInvalidDevice;
  if (const CUresult status = Gpu::get().create_context(); status != cu::kSuccess) return status;
  *context = &the_context;
  current_context = &the_context;
  return cu::kSuccess;
}
__attribute__((visibility("default"))) CUresult cuCtxDestroy_v2(CUcontext) { return cu::kSuccess; }
__attribute__((visibility("default"))) CUresult cuDevicePrimaryCtxRetain(CUcontext* context, CUdevice device) {
  if (!initialized.load()) return fake::kErrorNotInitialized;
  if (device != 0) return fake::kErrorInvalidDevice;
  if (const CUresult status = Gpu::get().create_context(); status != cu::kSuccess) return status;
  *context = &the_context;
  return cu::kSuccess;
}
__attribute__((visibility("default"))) CUresult cuDevicePrimaryCtxRelease_v2(CUdevice) { return cu::kSuccess; }
__attribute__((visibility("default"))) CUresult cuCtxGetCurrent(CUcontext* context) {
  *context = current_context;
  return cu::kSuccess;
}
__attribute__((visibility("default"))) CUresult cuCtxSetCurrent(CUcontext context) {
  current_context = context;
  return cu::kSuccess;
}
__attribute__((visibility("default"))) CUresult cuCtxPushCurrent_v2(CUcontext context) {
  current_context = context;
  return cu::kSuccess;
}
__attribute__((visibility("default"))) CUresult cuCtxPopCurrent_v2(CUcontext* context) {
  if (context != nullptr) *context = current_context;
  current_context = nullptr;
  return cu::kSuccess;
}
__attribute__((visibility("default"))) CUresult cuCtxGetDevice(CUdevice* device) {
  if (const CUresult status = needs_context(); status != cu::kSuccess) return status;
  *device = 0;
  return cu::kSuccess;
}
__attribute__((visibility("default"))) CUresult cuCtxSynchronize() { return needs_context(); }

// ---- memory ----

__attribute__((visibility("default"))) CUresult cuMemGetInfo_v2(std::size_t* free_bytes, std::size_t* total_bytes) {
  if (const CUresult status = needs_context(); status != cu::kSuccess) return status;
  Gpu& gpu = Gpu::get();
  const std::uint64_t capacity = gpu.capacity();
  const std::uint64_t used = gpu.used();
  *total_bytes = capacity;
  *free_bytes = used < capacity ? capacity - used : 0;
  return cu::kSuccess;
}
__attribute__((visibility("default"))) CUresult cuMemAlloc_v2(CUdeviceptr* pointer, std::size_t bytes) {
  return allocate_into(pointer, bytes, Kind::plain);
}
__attribute__((visibility("default"))) CUresult cuMemFree_v2(CUdeviceptr pointer) {
  if (const CUresult status = needs_context(); status != cu::kSuccess) return status;
  return Gpu::get().free(pointer, false);
}
__attribute__((visibility("default"))) CUresult cuMemAllocPitch_v2(CUdeviceptr* pointer, std::size_t* pitch,
                                                                   std::size_t width, std::size_t height,
                                                                   unsigned int element_bytes) {
  if (pitch == nullptr || width == 0 || height == 0 || (element_bytes != 4 && element_bytes != 8 && element_bytes != 16))
    return cu::kErrorInvalidValue;
  *pitch = (width + 511) / 512 * 512;  // rows padded to 512 bytes, as current GPUs do
  return allocate_into(pointer, *pitch * height, Kind::pitched);
}
__attribute__((visibility("default"))) CUresult cuMemAllocManaged(CUdeviceptr* pointer, std::size_t bytes,
                                                                  unsigned int) {
  return allocate_into(pointer, bytes, Kind::managed);
}
__attribute__((visibility("default"))) CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, std::size_t bytes,
                                                            const cu::MemAllocationProp* prop, unsigned long long) {
  if (handle == nullptr || prop == nullptr || prop->location.id != 0) return cu::kErrorInvalidValue;
  CUdeviceptr backing = 0;
  if (const CUresult status = allocate_into(&backing, bytes, Kind::physical); status != cu::kSuccess) return status;
  *handle = next_handle.fetch_add(1);
  const std::lock_guard lock(handles_mutex);
  handles[*handle] = backing;
  return cu::kSuccess;
}
__attribute__((visibility("default"))) CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  std::uintptr_t backing = 0;
  {
    const std::lock_guard lock(handles_mutex);
    const auto found = handles.find(handle);
    if (found == handles.end()) return fake::kErrorInvalidHandle;
    backing = found->second;
    handles.erase(found);
  }
  return Gpu::get().free(backing, true);
}

// Stream-ordered allocation: the fake's streams run nothing, so a free completes at once.
__attribute__((visibility("default"))) CUresult cuMemAllocAsync(CUdeviceptr* pointer, std::size_t bytes, CUstream) {
  return allocate_into(pointer, bytes, Kind::stream_ordered);
}
__attribute__((visibility("default"))) CUresult cuMemAllocAsync_ptsz(CUdeviceptr* pointer, std::size_t bytes,
                                                                     CUstream stream) {
  return cuMemAllocAsync(pointer, bytes, stream);
}
__attribute__((visibility("default"))) CUresult cuMemFreeAsync(CUdeviceptr pointer, CUstream) {
  if (const CUresult status = needs_context(); status != cu::kSuccess) return status;
  return Gpu::get().free(pointer, false);
}
__attribute__((visibility("default"))) CUresult cuMemFreeAsync_ptsz(CUdeviceptr pointer, CUstream stream) {
  return cuMemFreeAsync(pointer, stream);
}
__attribute__((visibility("default"))) CUresult cuMemAllocFromPoolAsync(CUdeviceptr* pointer, std::size_t bytes,
                                                                        CUmemoryPool pool, CUstream) {
  if (pool == nullptr) return cu::kErrorInvalidValue;
  return allocate_into(pointer, bytes, Kind::stream_ordered);
}
__attribute__((visibility("default"))) CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* pointer, std::size_t bytes,
                                                                             CUmemoryPool pool, CUstream stream) {
  return cuMemAllocFromPoolAsync(pointer, bytes, pool, stream);
}
__attribute__((visibility("default"))) CUresult cuMemPoolCreate(CUmemoryPool* pool, const void* props) {
  if (pool == nullptr || props == nullptr) return cu::kErrorInvalidValue;
  *pool = new CUmemPoolHandle_st{};
  return cu::kSuccess;
}
__attribute__((visibility("default"))) CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  if (pool == nullptr || pool == &default_pool) return cu::kErrorInvalidValue;
  delete pool;
  return cu::kSuccess;
}
__attribute__((visibility("default"))) CUresult cuMemPoolTrimTo(CUmemoryPool pool, std::size_t) {
  return pool == nullptr ? cu::kErrorInvalidValue : cu::kSuccess;
}
__attribute__((visibility("default"))) CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* pool, CUdevice device) {
  if (device != 0) return fake::kErrorInvalidDevice;
  *pool = &default_pool;
  return cu::kSuccess;
}

}  // extern "C"

// ---- cuGetProcAddress: the driver's own entry points, by base name, CUDA version and stream flavour ----

namespace {

struct ProcEntry {
  const char* name;   // as callers ask for it: the base name, no _v2
  int min_version;    // the CUDA version that introduced this ABI version of the call
  bool per_thread;    // the _ptsz flavour, for CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
  void* function;
};

template <typename Function>
void* address_of(Function* function) {
  return reinterpret_cast<void*>(function);
}

// Newest ABI version first within a name: the first entry the caller's version reaches wins.
const ProcEntry kProcTable[] = {
    {"cuInit", 2000, false, address_of(cuInit)},
    {"cuDriverGetVersion", 2020, false, address_of(cuDriverGetVersion)},
    {"cuDeviceGetCount", 2000, false, address_of(cuDeviceGetCount)},
    {"cuDeviceGet", 2000, false, address_of(cuDeviceGet)},
    {"cuDeviceGetName", 2000, false, address_of(cuDeviceGetName)},
    {"cuDeviceGetUuid", 11040, false, address_of(cuDeviceGetUuid_v2)},
    {"cuDeviceGetUuid", 9020, false, address_of(cuDeviceGetUuid)},
    {"cuDeviceTotalMem", 3020, false, address_of(cuDeviceTotalMem_v2)},
    {"cuDeviceGetAttribute", 2000, false, address_of(cuDeviceGetAttribute)},
    {"cuDeviceGetPCIBusId", 4010, false, address_of(cuDeviceGetPCIBusId)},
    {"cuGetErrorName", 6000, false, address_of(cuGetErrorName)},
    {"cuGetErrorString", 6000, false, address_of(cuGetErrorString)},
    {"cuCtxCreate", 3020, false, address_of(cuCtxCreate_v2)},
    {"cuCtxDestroy", 4000, false, address_of(cuCtxDestroy_v2)},
    {"cuDevicePrimaryCtxRetain", 7000, false, address_of(cuDevicePrimaryCtxRetain)},
    {"cuDevicePrimaryCtxRelease", 11000, false, address_of(cuDevicePrimaryCtxRelease_v2)},
    {"cuCtxGetCurrent", 4000, false, address_of(cuCtxGetCurrent)},
    {"cuCtxSetCurrent", 4000, false, address_of(cuCtxSetCurrent)},
    {"cuCtxPushCurrent", 4000, false, address_of(cuCtxPushCurrent_v2)},
    {"cuCtxPopCurrent", 4000, false, address_of(cuCtxPopCurrent_v2)},
    {"cuCtxGetDevice", 2000, false, address_of(cuCtxGetDevice)},
    {"cuCtxSynchronize", 2000, false, address_of(cuCtxSynchronize)},
    {"cuMemGetInfo", 3020, false, address_of(cuMemGetInfo_v2)},
    {"cuMemAlloc", 3020, false, address_of(cuMemAlloc_v2)},
    {"cuMemFree", 3020, false, address_of(cuMemFree_v2)},
    {"cuMemAllocPitch", 3020, false, address_of(cuMemAllocPitch_v2)},
    {"cuMemAllocManaged", 6000, false, address_of(cuMemAllocManaged)},
    {"cuMemCreate", 10020, false, address_of(cuMemCreate)},
    {"cuMemRelease", 10020, false, address_of(cuMemRelease)},
    {"cuMemAllocAsync", 11020, true, address_of(cuMemAllocAsync_ptsz)},
    {"cuMemAllocAsync", 11020, false, address_of(cuMemAllocAsync)},
    {"cuMemFreeAsync", 11020, true, address_of(cuMemFreeAsync_ptsz)},
    {"cuMemFreeAsync", 11020, false, address_of(cuMemFreeAsync)},
    {"cuMemAllocFromPoolAsync", 11020, true, address_of(cuMemAllocFromPoolAsync_ptsz)},
    {"cuMemAllocFromPoolAsync", 11020, false, address_of(cuMemAllocFromPoolAsync)},
    {"cuMemPoolCreate", 11020, false, address_of(cuMemPoolCreate)},
    {"cuMemPoolDestroy", 11020, false, address_of(cuMemPoolDestroy)},
    {"cuMemPoolTrimTo", 11020, false, address_of(cuMemPoolTrimTo)},
    {"cuDeviceGetDefaultMemPool", 11020, false, address_of(cuDeviceGetDefaultMemPool)},
};

constexpr unsigned long long kPerThreadDefaultStream = 2;  // CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
constexpr int kSymbolNotFound = 1;                         // CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND
constexpr int kVersionNotSufficient = 2;                   // CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT

CUresult lookup(const char* symbol, void** function, int version, unsigned long long flags, int* status) {
  if (symbol == nullptr || function == nullptr) return cu::kErrorInvalidValue;
  *function = nullptr;
  const bool per_thread = (flags & kPerThreadDefaultStream) != 0;
  bool named = false;
  for (const ProcEntry& entry : kProcTable) {
    if (std::string_view(entry.name) != symbol) continue;
    named = true;
    if (version < entry.min_version) continue;
    // A call without a _ptsz flavour answers both flavours.
    const bool has_per_thread = std::string_view(entry.name).find("Async") != std::string_view::npos;
    if (has_per_thread && entry.per_thread != per_thread) continue;
    *function = entry.function;
    if (status != nullptr) *status = 0;
    return cu::kSuccess;
  }
  if (status != nullptr) *status = named ? kVersionNotSufficient : kSymbolNotFound;
  return fake::kErrorNotFound;
}

}  // namespace

extern "C" {

// The CUDA 11.3+ signature, still exported.
__attribute__((visibility("default"))) CUresult cuGetProcAddress(const char* symbol, void** function, int version,
                                                                 unsigned long long flags) {
  return lookup(symbol, function, version, flags, nullptr);
}
// The CUDA 12.0+ signature (cuda.h maps cuGetProcAddress to it), also CUDA 13's.
__attribute__((visibility("default"))) CUresult cuGetProcAddress_v2(const char* symbol, void** function, int version,
                                                                    unsigned long long flags, int* status) {
  return lookup(symbol, function, version, flags, status);
}

}  // extern "C"
