// A library that wraps a libc call the way profilers and shims wrap malloc: it defines getppid itself and finds the
// real one with dlsym(RTLD_NEXT, "getppid"), which the interposer's dlsym answers. Loaded after the interposer (a
// later preload) or dlopen'ed by the program, its next getppid must be libc's, never its own
// (tests/integrations_cuda_intercept_test.cpp, through cuda_client's `probe`).
#include <dlfcn.h>
#include <unistd.h>

namespace {

using GetPpid = pid_t (*)();

// dlsym takes its caller from its return address: a tail call would make the caller's caller the one asking.
void* next_getppid() {
  void* volatile next = dlsym(RTLD_NEXT, "getppid");
  return next;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) pid_t getppid() {
  static const auto next = reinterpret_cast<GetPpid>(next_getppid());
  if (next == nullptr) return -1;
  return next();
}

/// What dlsym(RTLD_NEXT, "getppid") answers this library, asked now.
extern "C" __attribute__((visibility("default"))) void* plimsoll_next_probe() { return next_getppid(); }
