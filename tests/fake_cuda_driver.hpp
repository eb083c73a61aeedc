#pragma once
// A fake CUDA driver for tests: a cuda_driver::Api whose virtual memory calls do to host memory what the real
// driver does to a GPU's, so the CUDA backings run in CI (and under the sanitizers) with no GPU.
//
//   cuMemAddressReserve  mmap(PROT_NONE, MAP_NORESERVE): address space, no memory
//   cuMemCreate          memfd_create + ftruncate: a physical allocation, counted against the capacity
//   cuMemMap             mmap(MAP_FIXED | MAP_SHARED) of the memfd over the reservation, still PROT_NONE
//   cuMemSetAccess       mprotect(PROT_READ | PROT_WRITE)
//   cuMemUnmap           mmap(PROT_NONE, MAP_FIXED) back over the range: reserved again
//   cuMemRelease         closes the memfd once it is also unmapped (the memory goes back to the "device")
//   streams and events   counters: a stream's work completes at once unless a test holds the stream
//
// It is stricter than cuda.h where cuda.h leaves room: cuMemUnmap takes exactly one whole mapping (cuda.h:
// "cannot unmap a sub-range of an address range mapped by cuMemCreate / cuMemMap"; a part of one fails with
// CUDA_ERROR_INVALID_VALUE, as on the real driver), and calls that need a context fail with
// CUDA_ERROR_INVALID_CONTEXT unless the calling thread pushed one. Code that passes here relies on nothing a
// real driver might refuse. One FakeCudaDriver may exist at a time (the Api holds plain function pointers,
// which reach it through a global); every call is thread-safe.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "devices/cuda_driver.hpp"
#include "fake_cuda_errors.hpp"

namespace plimsoll::fake_cuda {

namespace cu = cuda_driver;

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;

struct Options {
  std::uint64_t capacity_bytes = 64 * kMiB;  // cuMemCreate and cuMemAlloc fail with OUT_OF_MEMORY past it
  std::uint64_t minimum_granularity = 2 * kMiB;
  std::uint64_t recommended_granularity = 2 * kMiB;
  bool vmm_supported = true;     // CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
  bool vmm_entry_points = true;  // false: the Api's cuMem{AddressReserve,Create,Map,...} stay null (an old driver)
  bool misalign_plain_allocations = false;  // cuMemAlloc returns addresses 256 bytes past a 2 MiB boundary
};

/// How often each call was made (successful or not).
struct Counters {
  std::uint64_t address_reserve = 0;
  std::uint64_t address_free = 0;
  std::uint64_t create = 0;
  std::uint64_t create_out_of_memory = 0;  // cuMemCreate calls refused for capacity
  std::uint64_t release = 0;
  std::uint64_t map = 0;
  std::uint64_t unmap = 0;
  std::uint64_t set_access = 0;
  std::uint64_t mem_alloc = 0;
  std::uint64_t mem_free = 0;
  std::uint64_t ctx_synchronize = 0;
  std::uint64_t ctx_push = 0;
  std::uint64_t ctx_pop = 0;
  std::uint64_t primary_retain = 0;
  std::uint64_t primary_release = 0;
  std::uint64_t event_create = 0;
  std::uint64_t event_record = 0;
  std::uint64_t event_query = 0;
  std::uint64_t host_register = 0;
  std::uint64_t host_unregister = 0;
  std::uint64_t copies = 0;  // cuMemcpyDtoH / cuMemcpyHtoD
};

/// Which call an injected failure hits.
enum class Call { create, map, set_access, unmap, event_create, event_record, host_register, mem_alloc };

class Driver;

/// A stream: `launch()` queues one unit of work. Work completes at once, unless the stream is held: then it
/// stays pending until release(). Events recorded on the stream complete with the work queued before them.
class Stream {
 public:
  void launch();
  void hold();
  void release();
  cu::Stream handle() noexcept { return reinterpret_cast<cu::Stream>(this); }

 private:
  friend class Driver;
  explicit Stream(Driver& driver) : driver_(driver) {}
  Driver& driver_;
  // Guarded by the driver's mutex. Invariant: completed <= submitted; completed == submitted unless held.
  std::uint64_t submitted_ = 0;
  std::uint64_t completed_ = 0;
  bool held_ = false;
};

class Driver {
 public:
  explicit Driver(Options options = {});
  ~Driver();
  Driver(const Driver&) = delete;
  Driver& operator=(const Driver&) = delete;

  const cu::Api& api() const noexcept { return api_; }
  Counters counters() const {
    const std::lock_guard lock(mutex_);
    return counters_;
  }
  /// Bytes currently mapped by cuMemMap.
  std::uint64_t mapped_bytes() const {
    const std::lock_guard lock(mutex_);
    std::uint64_t bytes = 0;
    for (const auto& [addr, mapping] : mappings_) bytes += mapping.bytes;
    return bytes;
  }
  /// Device memory held: cuMemCreate allocations not yet freed, plus cuMemAlloc regions.
  std::uint64_t used_bytes() const {
    const std::lock_guard lock(mutex_);
    return used_;
  }
  std::size_t live_allocations() const {
    const std::lock_guard lock(mutex_);
    return allocations_.size();
  }
  std::size_t reservations() const {
    const std::lock_guard lock(mutex_);
    return reservations_.size();
  }
  void set_capacity(std::uint64_t bytes) {
    const std::lock_guard lock(mutex_);
    options_.capacity_bytes = bytes;
  }
  /// The `nth` next call of `call` (1: the very next) and the `times - 1` after it return `result` without
  /// doing anything. `nth` 0 clears the injection.
  void fail(Call call, std::uint64_t nth, cu::Result result, std::uint64_t times = 1) {
    const std::lock_guard lock(mutex_);
    failures_[static_cast<int>(call)] = {nth, times, result};
  }
  /// A new stream, owned by the driver.
  Stream& create_stream() {
    const std::lock_guard lock(mutex_);
    streams_.push_back(std::unique_ptr<Stream>(new Stream(*this)));
    return *streams_.back();
  }
  /// Host bytes page-locked by cuMemHostRegister and not unregistered.
  std::uint64_t registered_bytes() const {
    const std::lock_guard lock(mutex_);
    std::uint64_t bytes = 0;
    for (const auto& [addr, length] : registered_) bytes += length;
    return bytes;
  }
  /// The legacy default stream (the null CUstream): cuEventRecord on nullptr records on it.
  Stream& default_stream() noexcept { return *default_stream_; }
  /// Whether a thread is waiting in cuCtxSynchronize right now.
  bool synchronizing() const {
    const std::lock_guard lock(mutex_);
    return synchronizing_ > 0;
  }

  static Driver& current() {
    Driver* driver = current_.load();
    if (driver == nullptr) std::abort();
    return *driver;
  }

 private:
  friend class Stream;

  struct Allocation {
    int fd = -1;
    std::uint64_t bytes = 0;
    int mappings = 0;
    bool released = false;
  };
  struct Mapping {
    std::uint64_t bytes = 0;
    cu::MemHandle handle = 0;
  };
  struct PlainRegion {
    std::uintptr_t raw = 0;
    std::uint64_t raw_bytes = 0;
    std::uint64_t bytes = 0;
  };
  struct Event {
    Stream* stream = nullptr;  // null: never recorded, which counts as complete (as on the real driver)
    std::uint64_t target = 0;
  };
  struct Failure {
    std::uint64_t countdown = 0;  // 0: none; 1: this call fails
    std::uint64_t times = 0;      // failures left once the countdown reached 1
    cu::Result result = cu::kSuccess;
  };

  static inline std::atomic<Driver*> current_{nullptr};
  static inline thread_local int context_depth_ = 0;  // cuCtxPushCurrent minus cuCtxPopCurrent, per thread

  bool injected(Call call, cu::Result& result) {  // with the lock held
    Failure& failure = failures_[static_cast<int>(call)];
    if (failure.countdown == 0) return false;
    if (failure.countdown > 1) {
      --failure.countdown;
      return false;
    }
    if (--failure.times == 0) failure.countdown = 0;
    result = failure.result;
    return true;
  }
  bool inside_reservation(std::uintptr_t addr, std::uint64_t bytes) const {
    auto found = reservations_.upper_bound(addr);
    if (found == reservations_.begin()) return false;
    --found;
    return addr >= found->first && addr + bytes <= found->first + found->second && addr + bytes > addr;
  }
  bool overlaps_mapping(std::uintptr_t addr, std::uint64_t bytes) const {
    auto found = mappings_.lower_bound(addr);
    if (found != mappings_.end() && found->first < addr + bytes) return true;
    if (found == mappings_.begin()) return false;
    --found;
    return found->first + found->second.bytes > addr;
  }
  /// Whether [addr, addr + bytes) is exactly a run of whole, adjacent mappings.
  bool whole_mappings(std::uintptr_t addr, std::uint64_t bytes) const {
    std::uintptr_t at = addr;
    while (at < addr + bytes) {
      const auto found = mappings_.find(at);
      if (found == mappings_.end()) return false;
      at += found->second.bytes;
    }
    return at == addr + bytes && bytes > 0;
  }
  void free_if_done(cu::MemHandle handle) {
    const auto found = allocations_.find(handle);
    if (found == allocations_.end() || !found->second.released || found->second.mappings != 0) return;
    ::close(found->second.fd);
    used_ -= found->second.bytes;
    allocations_.erase(found);
  }
  static void* reserve_pages(std::uint64_t bytes, std::uint64_t alignment, std::uintptr_t& raw,
                             std::uint64_t& raw_bytes) {
    raw_bytes = bytes + alignment;
    void* mapped = ::mmap(nullptr, raw_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (mapped == MAP_FAILED) return nullptr;
    raw = reinterpret_cast<std::uintptr_t>(mapped);
    return reinterpret_cast<void*>((raw + alignment - 1) / alignment * alignment);
  }
  static void back_to_reserved(std::uintptr_t addr, std::uint64_t bytes) {
    if (::mmap(reinterpret_cast<void*>(addr), bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED,
               -1, 0) == MAP_FAILED)
      std::abort();
  }
  bool has_context() const { return context_depth_ > 0; }

  // ---- the entry points ----
  cu::Result address_reserve(cu::DevicePtr* pointer, std::size_t bytes, std::size_t alignment, cu::DevicePtr hint,
                             unsigned long long flags);
  cu::Result address_free(cu::DevicePtr pointer, std::size_t bytes);
  cu::Result create(cu::MemHandle* handle, std::size_t bytes, const cu::MemAllocationProp* prop,
                    unsigned long long flags);
  cu::Result release_handle(cu::MemHandle handle);
  cu::Result map(cu::DevicePtr pointer, std::size_t bytes, std::size_t offset, cu::MemHandle handle,
                 unsigned long long flags);
  cu::Result unmap(cu::DevicePtr pointer, std::size_t bytes);
  cu::Result set_access(cu::DevicePtr pointer, std::size_t bytes, const cu::MemAccessDesc* descriptors,
                        std::size_t count);
  cu::Result granularity(std::size_t* granularity, const cu::MemAllocationProp* prop, int option);
  cu::Result mem_alloc(cu::DevicePtr* pointer, std::size_t bytes);
  cu::Result mem_free(cu::DevicePtr pointer);
  cu::Result mem_get_info(std::size_t* free_bytes, std::size_t* total_bytes);
  cu::Result ctx_synchronize();
  cu::Result event_record(cu::Event event, cu::Stream stream);
  cu::Result event_query(cu::Event event);
  static bool valid_prop(const cu::MemAllocationProp* prop) {
    return prop != nullptr && prop->type == cu::kMemAllocationTypePinned &&
           prop->location.type == cu::kMemLocationTypeDevice && prop->location.id == 0 &&
           prop->requested_handle_types == cu::kMemHandleTypeNone && prop->win32_handle_meta_data == nullptr;
  }

  cu::Api api_;
  mutable std::mutex mutex_;
  std::condition_variable streams_done_;  // notified when a stream completes work
  Options options_;
  Counters counters_;
  Failure failures_[static_cast<int>(Call::mem_alloc) + 1];  // one per Call
  std::uint64_t used_ = 0;
  cu::MemHandle next_handle_ = 0x1000;
  int synchronizing_ = 0;
  // Invariants: reservations_ are disjoint; mappings_ are disjoint, each inside a reservation, each of an
  // allocation in allocations_ (whose `mappings` counts them); an allocation is in the table until it is
  // both released and unmapped; used_ == the allocations' bytes + the plain regions' bytes.
  std::map<std::uintptr_t, std::uint64_t> reservations_;  // aligned base -> bytes
  std::map<std::uintptr_t, std::pair<std::uintptr_t, std::uint64_t>> reservation_raw_;  // base -> mmap'd range
  std::map<cu::MemHandle, Allocation> allocations_;
  std::map<std::uintptr_t, Mapping> mappings_;
  std::map<std::uintptr_t, PlainRegion> plain_;
  std::vector<std::unique_ptr<Stream>> streams_;
  Stream* default_stream_ = nullptr;  // owned by streams_
  std::map<std::uintptr_t, std::uint64_t> registered_;  // cuMemHostRegister'd ranges: start -> bytes
  std::set<Event*> events_;
};

// ---- Stream ----

inline void Stream::launch() {
  const std::lock_guard lock(driver_.mutex_);
  ++submitted_;
  if (!held_) completed_ = submitted_;
}

inline void Stream::hold() {
  const std::lock_guard lock(driver_.mutex_);
  held_ = true;
}

inline void Stream::release() {
  {
    const std::lock_guard lock(driver_.mutex_);
    held_ = false;
    completed_ = submitted_;
  }
  driver_.streams_done_.notify_all();
}

// ---- Driver ----

inline Driver::Driver(Options options) : options_(options) {
  Driver* expected = nullptr;
  if (!current_.compare_exchange_strong(expected, this))
    throw std::logic_error("only one fake_cuda::Driver may exist at a time");
  streams_.push_back(std::unique_ptr<Stream>(new Stream(*this)));
  default_stream_ = streams_.back().get();

  api_.init = [](unsigned int) { return cu::kSuccess; };
  api_.device_get_count = [](int* count) {
    *count = 1;
    return cu::kSuccess;
  };
  api_.device_get = [](cu::Device* device, int ordinal) {
    *device = ordinal;
    return ordinal == 0 ? cu::kSuccess : cu::kErrorInvalidValue;
  };
  api_.device_get_name = [](char* name, int length, cu::Device) {
    std::strncpy(name, "Fake GPU (memfd)", static_cast<std::size_t>(length));
    return cu::kSuccess;
  };
  api_.device_total_mem = [](std::size_t* bytes, cu::Device) {
    const std::lock_guard lock(current().mutex_);
    *bytes = current().options_.capacity_bytes;
    return cu::kSuccess;
  };
  api_.device_get_uuid = [](cu::Uuid* uuid, cu::Device) {
    std::memset(uuid->bytes, 0xfa, sizeof uuid->bytes);
    return cu::kSuccess;
  };
  api_.device_get_pci_bus_id = [](char* bus_id, int length, cu::Device) {
    std::strncpy(bus_id, "00000000:00:00.0", static_cast<std::size_t>(length));
    return cu::kSuccess;
  };
  api_.device_get_attribute = [](int* value, int attribute, cu::Device) {
    if (attribute == cu::kAttributeComputeCapabilityMajor) *value = 9;
    else if (attribute == cu::kAttributeComputeCapabilityMinor) *value = 0;
    else if (attribute == cu::kAttributeVirtualMemoryManagementSupported) *value = current().options_.vmm_supported;
    else return cu::kErrorInvalidValue;
    return cu::kSuccess;
  };
  api_.primary_ctx_retain = [](cu::Context* context, cu::Device) {
    const std::lock_guard lock(current().mutex_);
    ++current().counters_.primary_retain;
    *context = reinterpret_cast<cu::Context>(std::uintptr_t{0xc0de});
    return cu::kSuccess;
  };
  api_.primary_ctx_release = [](cu::Device) {
    const std::lock_guard lock(current().mutex_);
    ++current().counters_.primary_release;
    return cu::kSuccess;
  };
  api_.ctx_push_current = [](cu::Context) {
    ++context_depth_;
    const std::lock_guard lock(current().mutex_);
    ++current().counters_.ctx_push;
    return cu::kSuccess;
  };
  api_.ctx_pop_current = [](cu::Context* context) {
    if (context_depth_ == 0) return kErrorInvalidContext;
    --context_depth_;
    *context = reinterpret_cast<cu::Context>(std::uintptr_t{0xc0de});
    const std::lock_guard lock(current().mutex_);
    ++current().counters_.ctx_pop;
    return cu::kSuccess;
  };
  api_.mem_get_info = [](std::size_t* free_bytes, std::size_t* total_bytes) {
    return current().mem_get_info(free_bytes, total_bytes);
  };
  api_.get_error_name = [](cu::Result error, const char** name) {
    *name = error_name(error);
    return *name != nullptr ? cu::kSuccess : cu::kErrorInvalidValue;
  };
  api_.mem_alloc = [](cu::DevicePtr* pointer, std::size_t bytes) { return current().mem_alloc(pointer, bytes); };
  api_.mem_free = [](cu::DevicePtr pointer) { return current().mem_free(pointer); };
  // cuMemHostAlloc / cuMemFreeHost stay null: pinned host memory is not built yet (docs/cuda.md).
  api_.ctx_synchronize = [] { return current().ctx_synchronize(); };
  // Copies: the fake's device memory is host memory, readable once mapped with access (a copy of unmapped memory
  // faults, as a wrong copy would fail on the GPU). Counted, so tests see the contents went through the driver.
  api_.memcpy_dtoh = [](void* host, cu::DevicePtr device, std::size_t bytes) {
    if (!current().has_context()) return kErrorInvalidContext;
    std::memcpy(host, reinterpret_cast<const void*>(device), bytes);
    const std::lock_guard lock(current().mutex_);
    ++current().counters_.copies;
    return cu::kSuccess;
  };
  api_.memcpy_htod = [](cu::DevicePtr device, const void* host, std::size_t bytes) {
    if (!current().has_context()) return kErrorInvalidContext;
    std::memcpy(reinterpret_cast<void*>(device), host, bytes);
    const std::lock_guard lock(current().mutex_);
    ++current().counters_.copies;
    return cu::kSuccess;
  };
  if (options_.vmm_entry_points) {
    api_.mem_address_reserve = [](cu::DevicePtr* pointer, std::size_t bytes, std::size_t alignment,
                                  cu::DevicePtr hint, unsigned long long flags) {
      return current().address_reserve(pointer, bytes, alignment, hint, flags);
    };
    api_.mem_address_free = [](cu::DevicePtr pointer, std::size_t bytes) {
      return current().address_free(pointer, bytes);
    };
    api_.mem_create = [](cu::MemHandle* handle, std::size_t bytes, const cu::MemAllocationProp* prop,
                         unsigned long long flags) { return current().create(handle, bytes, prop, flags); };
    api_.mem_release = [](cu::MemHandle handle) { return current().release_handle(handle); };
    api_.mem_map = [](cu::DevicePtr pointer, std::size_t bytes, std::size_t offset, cu::MemHandle handle,
                      unsigned long long flags) { return current().map(pointer, bytes, offset, handle, flags); };
    api_.mem_unmap = [](cu::DevicePtr pointer, std::size_t bytes) { return current().unmap(pointer, bytes); };
    api_.mem_set_access = [](cu::DevicePtr pointer, std::size_t bytes, const cu::MemAccessDesc* descriptors,
                             std::size_t count) { return current().set_access(pointer, bytes, descriptors, count); };
    api_.mem_get_allocation_granularity = [](std::size_t* granularity, const cu::MemAllocationProp* prop,
                                             int option) { return current().granularity(granularity, prop, option); };
  }
  api_.event_create = [](cu::Event* event, unsigned int) {
    const std::lock_guard lock(current().mutex_);
    ++current().counters_.event_create;
    if (cu::Result result = cu::kSuccess; current().injected(Call::event_create, result)) return result;
    auto* created = new Event;
    current().events_.insert(created);
    *event = reinterpret_cast<cu::Event>(created);
    return cu::kSuccess;
  };
  api_.event_record = [](cu::Event event, cu::Stream stream) { return current().event_record(event, stream); };
  api_.event_query = [](cu::Event event) { return current().event_query(event); };
  api_.event_destroy = [](cu::Event event) {
    const std::lock_guard lock(current().mutex_);
    auto* destroyed = reinterpret_cast<Event*>(event);
    if (current().events_.erase(destroyed) == 0) return kErrorInvalidHandle;
    delete destroyed;
    return cu::kSuccess;
  };
  // cuMemHostRegister: the range must be mapped host memory (checked: the fake reads every page's first byte)
  // overlapping no registered range (CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED); cuMemHostUnregister takes exactly
  // a registered start (else CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED), as on the real driver.
  api_.mem_host_register = [](void* pointer, std::size_t bytes, unsigned int) {
    Driver& d = current();
    if (!d.has_context()) return kErrorInvalidContext;
    const std::lock_guard lock(d.mutex_);
    ++d.counters_.host_register;
    if (cu::Result result = cu::kSuccess; d.injected(Call::host_register, result)) return result;
    const auto start = reinterpret_cast<std::uintptr_t>(pointer);
    if (pointer == nullptr || bytes == 0) return cu::kErrorInvalidValue;
    const auto next = d.registered_.lower_bound(start);
    if ((next != d.registered_.end() && next->first < start + bytes) ||
        (next != d.registered_.begin() && std::prev(next)->first + std::prev(next)->second > start))
      return cu::Result{712};  // CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED
    for (std::uint64_t offset = 0; offset < bytes; offset += 4096)
      static_cast<void>(*static_cast<volatile const char*>(static_cast<char*>(pointer) + offset));
    d.registered_.emplace(start, bytes);
    return cu::kSuccess;
  };
  api_.mem_host_unregister = [](void* pointer) {
    Driver& d = current();
    if (!d.has_context()) return kErrorInvalidContext;
    const std::lock_guard lock(d.mutex_);
    ++d.counters_.host_unregister;
    if (d.registered_.erase(reinterpret_cast<std::uintptr_t>(pointer)) == 0) return cu::Result{713};
    return cu::kSuccess;
  };
  // Cross-stream ordering is not modelled: the wait is accepted and nothing more.
  api_.stream_wait_event = [](cu::Stream, cu::Event event, unsigned int) {
    const std::lock_guard lock(current().mutex_);
    return current().events_.count(reinterpret_cast<Event*>(event)) != 0 ? cu::kSuccess : kErrorInvalidHandle;
  };
}

inline Driver::~Driver() {
  for (const auto& [addr, mapping] : mappings_) back_to_reserved(addr, mapping.bytes);
  for (const auto& [handle, allocation] : allocations_) ::close(allocation.fd);
  for (const auto& [base, raw] : reservation_raw_) ::munmap(reinterpret_cast<void*>(raw.first), raw.second);
  for (const auto& [addr, region] : plain_) ::munmap(reinterpret_cast<void*>(region.raw), region.raw_bytes);
  for (Event* event : events_) delete event;
  current_.store(nullptr);
}

inline cu::Result Driver::address_reserve(cu::DevicePtr* pointer, std::size_t bytes, std::size_t alignment,
                                          cu::DevicePtr hint, unsigned long long flags) {
  const std::lock_guard lock(mutex_);
  ++counters_.address_reserve;
  const std::uint64_t granule = options_.minimum_granularity;
  if (pointer == nullptr || bytes == 0 || bytes % granule != 0 || hint != 0 || flags != 0)
    return cu::kErrorInvalidValue;
  if (alignment == 0) alignment = granule;
  if ((alignment & (alignment - 1)) != 0 || alignment % granule != 0) return cu::kErrorInvalidValue;
  std::uintptr_t raw = 0;
  std::uint64_t raw_bytes = 0;
  void* base = reserve_pages(bytes, alignment, raw, raw_bytes);
  if (base == nullptr) return cu::kErrorOutOfMemory;
  const auto address = reinterpret_cast<std::uintptr_t>(base);
  reservations_.emplace(address, bytes);
  reservation_raw_.emplace(address, std::make_pair(raw, raw_bytes));
  *pointer = address;
  return cu::kSuccess;
}

inline cu::Result Driver::address_free(cu::DevicePtr pointer, std::size_t bytes) {
  const std::lock_guard lock(mutex_);
  ++counters_.address_free;
  const auto found = reservations_.find(pointer);
  if (found == reservations_.end() || found->second != bytes) return cu::kErrorInvalidValue;
  if (overlaps_mapping(pointer, bytes)) return cu::kErrorInvalidValue;  // unmap first, says cuda.h
  const auto raw = reservation_raw_.at(pointer);
  ::munmap(reinterpret_cast<void*>(raw.first), raw.second);
  reservation_raw_.erase(pointer);
  reservations_.erase(found);
  return cu::kSuccess;
}

inline cu::Result Driver::create(cu::MemHandle* handle, std::size_t bytes, const cu::MemAllocationProp* prop,
                                 unsigned long long flags) {
  const std::lock_guard lock(mutex_);
  ++counters_.create;
  cu::Result result = cu::kSuccess;
  if (injected(Call::create, result)) return result;
  if (handle == nullptr || !valid_prop(prop) || flags != 0 || bytes == 0 || bytes % options_.minimum_granularity != 0)
    return cu::kErrorInvalidValue;
  if (bytes > options_.capacity_bytes || used_ > options_.capacity_bytes - bytes) {
    ++counters_.create_out_of_memory;
    return cu::kErrorOutOfMemory;
  }
  const int fd = ::memfd_create("plimsoll-fake-cuda", MFD_CLOEXEC);
  if (fd < 0) return cu::kErrorOutOfMemory;
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    ::close(fd);
    return cu::kErrorOutOfMemory;
  }
  *handle = ++next_handle_;
  allocations_.emplace(*handle, Allocation{.fd = fd, .bytes = bytes, .mappings = 0, .released = false});
  used_ += bytes;
  return cu::kSuccess;
}

inline cu::Result Driver::release_handle(cu::MemHandle handle) {
  const std::lock_guard lock(mutex_);
  ++counters_.release;
  const auto found = allocations_.find(handle);
  if (found == allocations_.end() || found->second.released) return kErrorInvalidHandle;
  found->second.released = true;
  free_if_done(handle);
  return cu::kSuccess;
}

inline cu::Result Driver::map(cu::DevicePtr pointer, std::size_t bytes, std::size_t offset, cu::MemHandle handle,
                              unsigned long long flags) {
  const std::lock_guard lock(mutex_);
  ++counters_.map;
  cu::Result result = cu::kSuccess;
  if (injected(Call::map, result)) return result;
  const auto found = allocations_.find(handle);
  if (found == allocations_.end() || found->second.released) return kErrorInvalidHandle;
  const std::uint64_t granule = options_.minimum_granularity;
  if (flags != 0 || bytes == 0 || pointer % granule != 0 || bytes % granule != 0 || offset % granule != 0 ||
      offset + bytes > found->second.bytes || !inside_reservation(pointer, bytes) || overlaps_mapping(pointer, bytes))
    return cu::kErrorInvalidValue;
  // Mapped but not yet accessible, as on the real driver: cuMemSetAccess comes next.
  if (::mmap(reinterpret_cast<void*>(pointer), bytes, PROT_NONE, MAP_SHARED | MAP_FIXED, found->second.fd,
             static_cast<off_t>(offset)) == MAP_FAILED)
    return cu::kErrorOutOfMemory;
  ++found->second.mappings;
  mappings_.emplace(pointer, Mapping{.bytes = bytes, .handle = handle});
  return cu::kSuccess;
}

inline cu::Result Driver::unmap(cu::DevicePtr pointer, std::size_t bytes) {
  const std::lock_guard lock(mutex_);
  ++counters_.unmap;
  cu::Result result = cu::kSuccess;
  if (injected(Call::unmap, result)) return result;
  const auto found = mappings_.find(pointer);
  if (found == mappings_.end() || found->second.bytes != bytes) return cu::kErrorInvalidValue;
  back_to_reserved(pointer, bytes);
  const cu::MemHandle handle = found->second.handle;
  mappings_.erase(found);
  --allocations_.at(handle).mappings;
  free_if_done(handle);
  return cu::kSuccess;
}

inline cu::Result Driver::set_access(cu::DevicePtr pointer, std::size_t bytes, const cu::MemAccessDesc* descriptors,
                                     std::size_t count) {
  const std::lock_guard lock(mutex_);
  ++counters_.set_access;
  cu::Result result = cu::kSuccess;
  if (injected(Call::set_access, result)) return result;
  if (descriptors == nullptr || count != 1 || descriptors->location.type != cu::kMemLocationTypeDevice ||
      descriptors->location.id != 0 || !whole_mappings(pointer, bytes))
    return cu::kErrorInvalidValue;
  int protection = PROT_NONE;
  if (descriptors->flags == cu::kMemAccessProtReadWrite) protection = PROT_READ | PROT_WRITE;
  else if (descriptors->flags == 0x1) protection = PROT_READ;
  else if (descriptors->flags != 0) return cu::kErrorInvalidValue;
  if (::mprotect(reinterpret_cast<void*>(pointer), bytes, protection) != 0) return cu::kErrorOutOfMemory;
  return cu::kSuccess;
}

inline cu::Result Driver::granularity(std::size_t* granularity, const cu::MemAllocationProp* prop, int option) {
  if (granularity == nullptr || !valid_prop(prop)) return cu::kErrorInvalidValue;
  if (option == cu::kMemAllocGranularityMinimum) *granularity = options_.minimum_granularity;
  else if (option == cu::kMemAllocGranularityRecommended) *granularity = options_.recommended_granularity;
  else return cu::kErrorInvalidValue;
  return cu::kSuccess;
}

inline cu::Result Driver::mem_alloc(cu::DevicePtr* pointer, std::size_t bytes) {
  if (!has_context()) return kErrorInvalidContext;
  const std::lock_guard lock(mutex_);
  ++counters_.mem_alloc;
  if (cu::Result result = cu::kSuccess; injected(Call::mem_alloc, result)) return result;
  if (pointer == nullptr || bytes == 0) return cu::kErrorInvalidValue;
  if (bytes > options_.capacity_bytes || used_ > options_.capacity_bytes - bytes) return cu::kErrorOutOfMemory;
  constexpr std::uint64_t kAlignment = 2 * kMiB;
  constexpr std::uint64_t kMisalignment = 256;
  std::uintptr_t raw = 0;
  std::uint64_t raw_bytes = 0;
  void* base = reserve_pages(bytes + kMisalignment, kAlignment, raw, raw_bytes);
  if (base == nullptr) return cu::kErrorOutOfMemory;
  const std::uintptr_t address =
      reinterpret_cast<std::uintptr_t>(base) + (options_.misalign_plain_allocations ? kMisalignment : 0);
  if (::mprotect(base, bytes + kMisalignment, PROT_READ | PROT_WRITE) != 0) {  // from the page boundary below
    ::munmap(reinterpret_cast<void*>(raw), raw_bytes);
    return cu::kErrorOutOfMemory;
  }
  plain_.emplace(address, PlainRegion{.raw = raw, .raw_bytes = raw_bytes, .bytes = bytes});
  used_ += bytes;
  *pointer = address;
  return cu::kSuccess;
}

inline cu::Result Driver::mem_free(cu::DevicePtr pointer) {
  if (!has_context()) return kErrorInvalidContext;
  const std::lock_guard lock(mutex_);
  ++counters_.mem_free;
  const auto found = plain_.find(pointer);
  if (found == plain_.end()) return cu::kErrorInvalidValue;
  ::munmap(reinterpret_cast<void*>(found->second.raw), found->second.raw_bytes);
  used_ -= found->second.bytes;
  plain_.erase(found);
  return cu::kSuccess;
}

inline cu::Result Driver::mem_get_info(std::size_t* free_bytes, std::size_t* total_bytes) {
  if (!has_context()) return kErrorInvalidContext;
  const std::lock_guard lock(mutex_);
  *total_bytes = options_.capacity_bytes;
  *free_bytes = used_ < options_.capacity_bytes ? options_.capacity_bytes - used_ : 0;
  return cu::kSuccess;
}

inline cu::Result Driver::ctx_synchronize() {
  if (!has_context()) return kErrorInvalidContext;
  std::unique_lock lock(mutex_);
  ++counters_.ctx_synchronize;
  ++synchronizing_;
  streams_done_.wait(lock, [&] {
    return std::all_of(streams_.begin(), streams_.end(),
                       [](const std::unique_ptr<Stream>& stream) { return stream->completed_ == stream->submitted_; });
  });
  --synchronizing_;
  return cu::kSuccess;
}

inline cu::Result Driver::event_record(cu::Event event, cu::Stream stream) {
  const std::lock_guard lock(mutex_);
  ++counters_.event_record;
  if (cu::Result result = cu::kSuccess; injected(Call::event_record, result)) return result;
  auto* recorded = reinterpret_cast<Event*>(event);
  auto* on = stream == nullptr ? default_stream_ : reinterpret_cast<Stream*>(stream);
  if (events_.count(recorded) == 0) return kErrorInvalidHandle;
  recorded->stream = on;
  recorded->target = on->submitted_;
  return cu::kSuccess;
}

inline cu::Result Driver::event_query(cu::Event event) {
  const std::lock_guard lock(mutex_);
  ++counters_.event_query;
  auto* queried = reinterpret_cast<Event*>(event);
  if (events_.count(queried) == 0) return kErrorInvalidHandle;
  if (queried->stream == nullptr || queried->stream->completed_ >= queried->target) return cu::kSuccess;
  return cu::kErrorNotReady;
}

}  // namespace plimsoll::fake_cuda
