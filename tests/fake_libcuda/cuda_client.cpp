// A CUDA driver client for the interposer's tests and bench: it reaches libcuda.so.1 one of three ways (argv[1]:
// `linked` calls by name, built linked against the driver; `dlsym` opens it and looks versioned names up;
// `procaddress` asks cuGetProcAddress_v2 for base names, as the CUDA runtime does), then runs the operations in
// the rest of argv, printing one line per operation (the tests read them).
//
//   init | primary            cuInit + cuCtxCreate | cuDevicePrimaryCtxRetain + cuCtxPushCurrent
//   alloc SIZE | free         cuMemAlloc (kept) | cuMemFree of the newest kept allocation
//   info | total              cuMemGetInfo | cuDeviceTotalMem
//   pitch WIDTH HEIGHT | managed SIZE | create SIZE | async SIZE | pool SIZE
//   fill SIZE                 allocates SIZE until refused; prints how many
//   churn ROUNDS MAXSIZE SEED allocates and frees at random, at most 4 live; prints admitted and refused
//   bench N                   N x (cuMemAlloc 4KiB + cuMemFree), then N x cuMemGetInfo; prints ns per call
//   sleep MS | hold           sleeps | prints "holding" and sleeps until killed
//   next                      dlsym(RTLD_NEXT, "malloc"), as a library wrapping malloc does: prints "next 1" when it
//                             is libc's
//   probe preloaded|PATH      asks tests/fake_libcuda/next_probe.cpp (a later preload, or dlopen'ed from PATH) what
//                             its dlsym(RTLD_NEXT, "getppid") is: prints "probe libc=L own=O" (L: it is libc's
//                             getppid; O: it is the probe's own)
#include <dlfcn.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "devices/cuda_driver.hpp"
#include "plimsoll/size.hpp"

namespace cu = plimsoll::cuda_driver;
// The driver's types as the fake and the interposer define their entry points (devices/cuda_driver.hpp): a call
// through a pointer of another type is undefined (UBSan's -fsanitize=function stops it).
using CUdeviceptr = cu::DevicePtr;
using CUcontext = cu::Context;
using CUstream = cu::Stream;
using CUmemoryPool = cu::MemPool;

#ifdef PLIMSOLL_CLIENT_LINKED
extern "C" {
int cuInit(unsigned int);
int cuDeviceGet(int*, int);
int cuCtxCreate_v2(CUcontext*, unsigned int, int);
int cuDevicePrimaryCtxRetain(CUcontext*, int);
int cuCtxPushCurrent_v2(CUcontext);
int cuMemAlloc_v2(CUdeviceptr*, std::size_t);
int cuMemFree_v2(CUdeviceptr);
int cuMemGetInfo_v2(std::size_t*, std::size_t*);
int cuDeviceTotalMem_v2(std::size_t*, int);
int cuMemAllocPitch_v2(CUdeviceptr*, std::size_t*, std::size_t, std::size_t, unsigned int);
int cuMemAllocManaged(CUdeviceptr*, std::size_t, unsigned int);
int cuMemCreate(unsigned long long*, std::size_t, const cu::MemAllocationProp*, unsigned long long);
int cuMemRelease(unsigned long long);
int cuMemAllocAsync(CUdeviceptr*, std::size_t, CUstream);
int cuMemFreeAsync(CUdeviceptr, CUstream);
int cuMemPoolCreate(CUmemoryPool*, const void*);
int cuMemPoolDestroy(CUmemoryPool);
int cuMemAllocFromPoolAsync(CUdeviceptr*, std::size_t, CUmemoryPool, CUstream);
}
#endif

namespace {

struct Driver {
  int (*init)(unsigned int) = nullptr;
  int (*device_get)(int*, int) = nullptr;
  int (*ctx_create)(CUcontext*, unsigned int, int) = nullptr;
  int (*primary_retain)(CUcontext*, int) = nullptr;
  int (*ctx_push)(CUcontext) = nullptr;
  int (*mem_alloc)(CUdeviceptr*, std::size_t) = nullptr;
  int (*mem_free)(CUdeviceptr) = nullptr;
  int (*mem_get_info)(std::size_t*, std::size_t*) = nullptr;
  int (*total_mem)(std::size_t*, int) = nullptr;
  int (*alloc_pitch)(CUdeviceptr*, std::size_t*, std::size_t, std::size_t, unsigned int) = nullptr;
  int (*alloc_managed)(CUdeviceptr*, std::size_t, unsigned int) = nullptr;
  int (*mem_create)(unsigned long long*, std::size_t, const cu::MemAllocationProp*, unsigned long long) = nullptr;
  int (*mem_release)(unsigned long long) = nullptr;
  int (*alloc_async)(CUdeviceptr*, std::size_t, CUstream) = nullptr;
  int (*free_async)(CUdeviceptr, CUstream) = nullptr;
  int (*pool_create)(CUmemoryPool*, const void*) = nullptr;
  int (*pool_destroy)(CUmemoryPool) = nullptr;
  int (*alloc_from_pool)(CUdeviceptr*, std::size_t, CUmemoryPool, CUstream) = nullptr;
};

template <typename Function>
void set(Function& slot, void* address) {
  slot = reinterpret_cast<Function>(address);
}

[[noreturn]] void fail(const std::string& why) {
  std::fprintf(stderr, "cuda_client: %s\n", why.c_str());
  std::exit(2);
}

Driver open_driver(std::string_view how) {
  Driver d;
  if (how == "linked") {
#ifdef PLIMSOLL_CLIENT_LINKED
    d = Driver{cuInit, cuDeviceGet, cuCtxCreate_v2, cuDevicePrimaryCtxRetain, cuCtxPushCurrent_v2, cuMemAlloc_v2,
               cuMemFree_v2, cuMemGetInfo_v2, cuDeviceTotalMem_v2, cuMemAllocPitch_v2, cuMemAllocManaged, cuMemCreate,
               cuMemRelease, cuMemAllocAsync, cuMemFreeAsync, cuMemPoolCreate, cuMemPoolDestroy, cuMemAllocFromPoolAsync};
    return d;
#else
    fail("this build of the client is not linked against libcuda.so.1; use dlsym or procaddress");
#endif
  }
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) fail(std::string("dlopen libcuda.so.1: ") + dlerror());
  auto resolve = [&](const char* versioned, const char* base) -> void* {
    if (how == "dlsym") return dlsym(library, versioned);
    using GetProcAddress = int (*)(const char*, void**, int, unsigned long long, int*);
    static auto get_proc_address = reinterpret_cast<GetProcAddress>(dlsym(library, "cuGetProcAddress_v2"));
    if (get_proc_address == nullptr) fail("no cuGetProcAddress_v2");
    void* function = nullptr;
    int status = -1;
    if (get_proc_address(base, &function, 12000, 0, &status) != 0) return nullptr;
    return function;
  };
  if (how != "dlsym" && how != "procaddress") fail("the first argument is linked, dlsym or procaddress");
  set(d.init, resolve("cuInit", "cuInit"));
  set(d.device_get, resolve("cuDeviceGet", "cuDeviceGet"));
  set(d.ctx_create, resolve("cuCtxCreate_v2", "cuCtxCreate"));
  set(d.primary_retain, resolve("cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRetain"));
  set(d.ctx_push, resolve("cuCtxPushCurrent_v2", "cuCtxPushCurrent"));
  set(d.mem_alloc, resolve("cuMemAlloc_v2", "cuMemAlloc"));
  set(d.mem_free, resolve("cuMemFree_v2", "cuMemFree"));
  set(d.mem_get_info, resolve("cuMemGetInfo_v2", "cuMemGetInfo"));
  set(d.total_mem, resolve("cuDeviceTotalMem_v2", "cuDeviceTotalMem"));
  set(d.alloc_pitch, resolve("cuMemAllocPitch_v2", "cuMemAllocPitch"));
  set(d.alloc_managed, resolve("cuMemAllocManaged", "cuMemAllocManaged"));
  set(d.mem_create, resolve("cuMemCreate", "cuMemCreate"));
  set(d.mem_release, resolve("cuMemRelease", "cuMemRelease"));
  set(d.alloc_async, resolve("cuMemAllocAsync", "cuMemAllocAsync"));
  set(d.free_async, resolve("cuMemFreeAsync", "cuMemFreeAsync"));
  set(d.pool_create, resolve("cuMemPoolCreate", "cuMemPoolCreate"));
  set(d.pool_destroy, resolve("cuMemPoolDestroy", "cuMemPoolDestroy"));
  set(d.alloc_from_pool, resolve("cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync"));
  if (d.mem_alloc == nullptr || d.mem_get_info == nullptr) fail("the driver lacks cuMemAlloc or cuMemGetInfo");
  return d;
}

std::uint64_t size_argument(char** argv, int& i, int argc) {
  if (i + 1 >= argc) fail("an operation lacks its size");
  return plimsoll::parse_size(argv[++i]);
}

double ns_per(std::chrono::steady_clock::duration elapsed, int count) {
  return static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count()) / count;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) fail("usage: cuda_client linked|dlsym|procaddress OPERATION...");
  const Driver d = open_driver(argv[1]);
  std::vector<CUdeviceptr> kept;
  std::vector<unsigned long long> handles;
  std::vector<CUmemoryPool> pools;  // destroyed at the end (a sanitized run's leak check sees them)
  for (int i = 2; i < argc; ++i) {
    const std::string_view op = argv[i];
    if (op == "next") {
      // libc's, found through a handle on libc: not RTLD_DEFAULT's, which a sanitizer's malloc would be.
      void* const next = dlsym(RTLD_NEXT, "malloc");
      void* const libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
      std::printf("next %d\n", next != nullptr && libc != nullptr && next == dlsym(libc, "malloc") ? 1 : 0);
    } else if (op == "probe") {
      if (i + 1 >= argc) fail("probe needs `preloaded` or the probe library's path");
      const std::string where = argv[++i];
      const bool preloaded = where == "preloaded";
      void* const probe_library = preloaded ? RTLD_DEFAULT : dlopen(where.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!preloaded && probe_library == nullptr) fail("dlopen " + where + ": " + dlerror());
      void* const probe_symbol = dlsym(probe_library, "plimsoll_next_probe");
      if (probe_symbol == nullptr) fail("no plimsoll_next_probe in " + where);
      void* const next = reinterpret_cast<void* (*)()>(probe_symbol)();
      void* const libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
      Dl_info probe_object{}, next_object{};
      const bool own = next != nullptr && dladdr(next, &next_object) != 0 && dladdr(probe_symbol, &probe_object) != 0 &&
                       next_object.dli_fbase == probe_object.dli_fbase;
      std::printf("probe libc=%d own=%d\n", next != nullptr && libc != nullptr && next == dlsym(libc, "getppid") ? 1 : 0,
                  own ? 1 : 0);
    } else if (op == "init") {
      CUcontext context = nullptr;
      int device = 0;
      const int a = d.init(0), b = d.device_get(&device, 0), c = d.ctx_create(&context, 0, device);
      std::printf("init %d %d %d\n", a, b, c);
    } else if (op == "primary") {
      CUcontext context = nullptr;
      const int a = d.init(0), b = d.primary_retain(&context, 0), c = d.ctx_push(context);
      std::printf("primary %d %d %d\n", a, b, c);
    } else if (op == "alloc" || op == "managed" || op == "async") {
      const std::uint64_t bytes = size_argument(argv, i, argc);
      CUdeviceptr pointer = 0;
      const int status = op == "alloc"     ? d.mem_alloc(&pointer, bytes)
                         : op == "managed" ? d.alloc_managed(&pointer, bytes, 1)
                                           : d.alloc_async(&pointer, bytes, nullptr);
      if (status == 0) kept.push_back(pointer);
      std::printf("%s %llu %d\n", argv[i - 1], static_cast<unsigned long long>(bytes), status);
    } else if (op == "free") {
      if (kept.empty()) fail("free with nothing allocated");
      std::printf("free %d\n", d.mem_free(kept.back()));
      kept.pop_back();
    } else if (op == "freeasync") {
      if (kept.empty()) fail("freeasync with nothing allocated");
      std::printf("freeasync %d\n", d.free_async(kept.back(), nullptr));
      kept.pop_back();
    } else if (op == "info") {
      std::size_t free_bytes = 0, total_bytes = 0;
      const int status = d.mem_get_info(&free_bytes, &total_bytes);
      std::printf("info %d free=%zu total=%zu\n", status, free_bytes, total_bytes);
    } else if (op == "total") {
      std::size_t total_bytes = 0;
      const int status = d.total_mem(&total_bytes, 0);
      std::printf("total %d %zu\n", status, total_bytes);
    } else if (op == "pitch") {
      const std::uint64_t width = size_argument(argv, i, argc), height = size_argument(argv, i, argc);
      CUdeviceptr pointer = 0;
      std::size_t pitch = 0;
      const int status = d.alloc_pitch(&pointer, &pitch, width, height, 4);
      if (status == 0) kept.push_back(pointer);
      std::printf("pitch %d %zu\n", status, pitch);
    } else if (op == "create") {
      const std::uint64_t bytes = size_argument(argv, i, argc);
      const cu::MemAllocationProp prop = cu::device_allocation_prop(0);
      unsigned long long handle = 0;
      const int status = d.mem_create(&handle, bytes, &prop, 0);
      if (status == 0) handles.push_back(handle);
      std::printf("create %llu %d\n", static_cast<unsigned long long>(bytes), status);
    } else if (op == "release") {
      if (handles.empty()) fail("release with nothing created");
      std::printf("release %d\n", d.mem_release(handles.back()));
      handles.pop_back();
    } else if (op == "pool") {
      const std::uint64_t bytes = size_argument(argv, i, argc);
      CUmemoryPool pool = nullptr;
      const char props[88] = {};
      CUdeviceptr pointer = 0;
      const int created = d.pool_create(&pool, props);
      if (created == 0) pools.push_back(pool);
      const int status = created == 0 ? d.alloc_from_pool(&pointer, bytes, pool, nullptr) : created;
      if (status == 0) kept.push_back(pointer);
      std::printf("pool %llu %d\n", static_cast<unsigned long long>(bytes), status);
    } else if (op == "fill") {
      const std::uint64_t bytes = size_argument(argv, i, argc);
      int count = 0, status = 0;
      for (CUdeviceptr pointer = 0; (status = d.mem_alloc(&pointer, bytes)) == 0; ++count) kept.push_back(pointer);
      std::printf("fill %d %d\n", count, status);
    } else if (op == "churn") {
      const std::uint64_t rounds = size_argument(argv, i, argc), max_bytes = size_argument(argv, i, argc);
      const std::uint64_t seed = size_argument(argv, i, argc);
      std::mt19937_64 random(seed);
      std::vector<CUdeviceptr> live;
      std::uint64_t admitted = 0, refused = 0;
      for (std::uint64_t round = 0; round < rounds; ++round) {
        std::this_thread::yield();  // with more clients than cores, let them meet rather than run in turn
        if (live.size() >= 4 || (!live.empty() && random() % 2 == 0)) {
          const std::size_t victim = random() % live.size();
          if (d.mem_free(live[victim]) != 0) fail("cuMemFree refused a live allocation");
          live.erase(live.begin() + static_cast<std::ptrdiff_t>(victim));
          continue;
        }
        CUdeviceptr pointer = 0;
        const std::uint64_t bytes = 1 + random() % max_bytes;
        const int status = d.mem_alloc(&pointer, bytes);
        if (status == 0) {
          live.push_back(pointer);
          ++admitted;
        } else if (status == cu::kErrorOutOfMemory) {
          ++refused;
        } else {
          fail("cuMemAlloc failed with " + std::to_string(status));
        }
      }
      for (CUdeviceptr pointer : live) d.mem_free(pointer);
      std::printf("churn admitted=%llu refused=%llu\n", static_cast<unsigned long long>(admitted),
                  static_cast<unsigned long long>(refused));
    } else if (op == "bench") {
      const int count = static_cast<int>(size_argument(argv, i, argc));
      CUdeviceptr pointer = 0;
      auto start = std::chrono::steady_clock::now();
      for (int n = 0; n < count; ++n) {
        if (d.mem_alloc(&pointer, 4096) != 0 || d.mem_free(pointer) != 0) fail("bench: an allocation failed");
      }
      const double alloc_free = ns_per(std::chrono::steady_clock::now() - start, count);
      std::size_t free_bytes = 0, total_bytes = 0;
      start = std::chrono::steady_clock::now();
      for (int n = 0; n < count; ++n) d.mem_get_info(&free_bytes, &total_bytes);
      const double info = ns_per(std::chrono::steady_clock::now() - start, count);
      std::printf("bench alloc+free=%.1f info=%.1f\n", alloc_free, info);
    } else if (op == "sleep") {
      std::this_thread::sleep_for(std::chrono::milliseconds(size_argument(argv, i, argc)));
    } else if (op == "hold") {
      std::printf("holding\n");
      std::fflush(stdout);
      for (;;) ::pause();
    } else {
      fail("unknown operation '" + std::string(op) + "'");
    }
    std::fflush(stdout);
  }
  for (CUmemoryPool pool : pools)
    if (d.pool_destroy != nullptr) d.pool_destroy(pool);
  return 0;
}
