// libplimsoll_torch_cuda.so as PyTorch loads it: dlopen, dlsym of the CUDAPluggableAllocator entry points.
// Without a usable CUDA device (CI, this machine) plimsoll_torch_malloc must return NULL, say why once on
// stderr, and not crash; and the library must export its ten C functions and nothing else. Host-memory failures are
// injected by replacing operator new in this test program (failing_operator_new.hpp), which the library, loaded into
// it, uses too: its reasons kept without allocating. Those tests skip under a sanitizer.
#include <dlfcn.h>
#include <sys/types.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <cstdlib>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "failing_operator_new.hpp"
#include "plimsoll/torch_cuda.h"

namespace {

using ::testing::HasSubstr;

using Malloc = void* (*)(ssize_t, int, plimsoll_cuda_stream);
using Free = void (*)(void*, ssize_t, int, plimsoll_cuda_stream);
using StatsJson = const char* (*)(int);
using EmptyCache = long long (*)(int);
using ResetPeak = int (*)(int);
using RecordStream = int (*)(void*, int, plimsoll_cuda_stream);
using LastError = const char* (*)();

std::string run(const std::string& command) {
  std::string output;
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(::popen(command.c_str(), "r"), ::pclose);
  if (!pipe) return output;
  std::array<char, 4096> buffer{};
  while (std::fgets(buffer.data(), static_cast<int>(buffer.size()), pipe.get()) != nullptr) output += buffer.data();
  return output;
}

// Where the build put the library, unless PLIMSOLL_TORCH_CUDA_SO names another copy (scripts/gpu-check.sh runs
// this test from a bundle built elsewhere).
std::string library_path() {
  const char* path = std::getenv("PLIMSOLL_TORCH_CUDA_SO");
  return path != nullptr && *path != '\0' ? path : PLIMSOLL_TORCH_CUDA_SO;
}

bool cuda_device_configured() {
  // A machine with a GPU (and, once the runtime wiring lands, cuda:0) would hand out memory: skip the
  // "no device" expectations there rather than fail.
  void* driver = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (driver == nullptr) return false;
  ::dlclose(driver);
  return true;
}

TEST(TorchCudaSo, ExportsOnlyTheAllocatorEntryPoints) {
  const std::string symbols = run("nm -D --defined-only " + library_path() + " 2>&1");
  ASSERT_THAT(symbols, HasSubstr("plimsoll_torch_malloc"));
  std::vector<std::string> exported;
  std::size_t at = 0;
  while (at < symbols.size()) {
    const std::size_t end = symbols.find('\n', at);
    const std::string line = symbols.substr(at, end == std::string::npos ? std::string::npos : end - at);
    at = end == std::string::npos ? symbols.size() : end + 1;
    // "0000000000001234 T name": keep text/data/bss symbols; the version node (A) is not a symbol we define.
    if (line.size() > 19 && line[17] != 'A' && line[17] != 'w' && line[17] != 'U') exported.push_back(line.substr(19));
  }
  EXPECT_THAT(exported, ::testing::UnorderedElementsAre("plimsoll_torch_malloc", "plimsoll_torch_free",
                                                        "plimsoll_torch_cuda_stats_json",
                                                        "plimsoll_torch_cuda_empty_cache",
                                                        "plimsoll_torch_cuda_reset_peak", "plimsoll_torch_cuda_pause",
                                                        "plimsoll_torch_cuda_resume", "plimsoll_torch_cuda_is_paused",
                                                        "plimsoll_torch_cuda_last_error",
                                                        "plimsoll_torch_record_stream"))
      << symbols;
}

TEST(TorchCudaSo, MallocWithoutACudaDeviceReturnsNullAndSaysWhyOnce) {
  if (cuda_device_configured()) GTEST_SKIP() << "a CUDA driver is installed: run the GPU checks of docs/pytorch.md";
  // The library's runtime reads the environment on its first call: keep the runner's settings out of it.
  ::unsetenv("PLIMSOLL_CONFIG");
  ::unsetenv("PLIMSOLL_VISIBLE_DEVICES");
  ::unsetenv("PLIMSOLL_TORCH_RECORD");
  ::setenv("PLIMSOLL_CPU_FALLBACK", "0", 1);
  void* library = ::dlopen(library_path().c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(library, nullptr) << ::dlerror();
  auto torch_malloc = reinterpret_cast<Malloc>(::dlsym(library, "plimsoll_torch_malloc"));
  auto torch_free = reinterpret_cast<Free>(::dlsym(library, "plimsoll_torch_free"));
  auto stats_json = reinterpret_cast<StatsJson>(::dlsym(library, "plimsoll_torch_cuda_stats_json"));
  ASSERT_NE(torch_malloc, nullptr);
  ASSERT_NE(torch_free, nullptr);
  ASSERT_NE(stats_json, nullptr);

  ::testing::internal::CaptureStderr();
  void* first = torch_malloc(1 << 20, 0, nullptr);
  void* second = torch_malloc(4096, 0, nullptr);
  torch_free(nullptr, 0, 0, nullptr);
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(first, nullptr);
  EXPECT_EQ(second, nullptr);
  EXPECT_THAT(said, HasSubstr("plimsoll: "));
  EXPECT_THAT(said, HasSubstr("returning NULL to PyTorch for cuda:0"));
  EXPECT_EQ(said.find("returning NULL"), said.rfind("returning NULL")) << "said once, not per call:\n" << said;
  EXPECT_EQ(stats_json(0), nullptr) << "no device was created";
  auto empty_cache = reinterpret_cast<EmptyCache>(::dlsym(library, "plimsoll_torch_cuda_empty_cache"));
  auto reset_peak = reinterpret_cast<ResetPeak>(::dlsym(library, "plimsoll_torch_cuda_reset_peak"));
  ASSERT_NE(empty_cache, nullptr);
  ASSERT_NE(reset_peak, nullptr);
  EXPECT_EQ(empty_cache(0), -1) << "no device was created";
  EXPECT_EQ(reset_peak(0), -1);
  EXPECT_EQ(torch_malloc(-1, 0, nullptr), nullptr);
  auto pause = reinterpret_cast<long long (*)(int, int)>(::dlsym(library, "plimsoll_torch_cuda_pause"));
  auto resume = reinterpret_cast<int (*)(int)>(::dlsym(library, "plimsoll_torch_cuda_resume"));
  auto is_paused = reinterpret_cast<int (*)(int)>(::dlsym(library, "plimsoll_torch_cuda_is_paused"));
  auto last_error = reinterpret_cast<const char* (*)()>(::dlsym(library, "plimsoll_torch_cuda_last_error"));
  ASSERT_TRUE(pause != nullptr && resume != nullptr && is_paused != nullptr && last_error != nullptr);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(pause(0, 1), -1) << "no device was created";
  EXPECT_THAT(last_error(), HasSubstr("never allocated on it"));
  EXPECT_EQ(resume(0), -1);
  EXPECT_EQ(is_paused(0), -1);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(), HasSubstr("cannot resume cuda:0"));
  auto record_stream = reinterpret_cast<int (*)(void*, int, plimsoll_cuda_stream)>(
      ::dlsym(library, "plimsoll_torch_record_stream"));
  ASSERT_NE(record_stream, nullptr);
  int local = 0;
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(record_stream(&local, 0, nullptr), -1) << "no device was created";
  EXPECT_THAT(last_error(), HasSubstr("never allocated on it"));
  EXPECT_EQ(record_stream(&local, -1, nullptr), -1) << "no device holds it";
  EXPECT_THAT(last_error(), HasSubstr("no device of plimsoll's holds a live allocation"));
  EXPECT_THAT(::testing::internal::GetCapturedStderr(), HasSubstr("cannot record_stream"));
  // PyTorch passes an empty tensor's null pointer on, as it does to free: nothing to order, nothing said.
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(record_stream(nullptr, -1, nullptr), 0);
  EXPECT_EQ(record_stream(nullptr, 0, nullptr), 0);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  // Not dlclosed: the runtime it created lives until the process exits, as under PyTorch.
}

// record_stream with no device named (PyTorch's hook passes none) finds the device holding the pointer; when saying
// that none does fails for want of host memory, the failure is reported as the device holding it, with the reason
// (std::bad_alloc) when that much can be built, and a fixed message, allocating nothing, when not.
TEST(TorchCudaSo, RecordStreamOutOfHostMemorySaysTheDeviceHoldingIt) {
  SKIP_UNLESS_NEW_CAN_FAIL();
  void* library = ::dlopen(library_path().c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(library, nullptr) << ::dlerror();
  auto record_stream = reinterpret_cast<RecordStream>(::dlsym(library, "plimsoll_torch_record_stream"));
  auto last_error = reinterpret_cast<LastError>(::dlsym(library, "plimsoll_torch_cuda_last_error"));
  ASSERT_TRUE(record_stream != nullptr && last_error != nullptr);
  int local = 0;  // no device of plimsoll's holds it: the call builds its "no device ... holds" reason
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(record_stream(&local, -1, nullptr), -1) << "the library's state made, with host memory";
  ::testing::internal::GetCapturedStderr();

  ::testing::internal::CaptureStderr();
  t_fail_next_news = 1;  // that reason's string fails; what follows it succeeds
  EXPECT_EQ(record_stream(&local, -1, nullptr), -1);
  const bool injected = t_fail_next_news == 0;
  t_fail_next_news = 0;
  std::string said = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(injected) << "the library's allocations did not reach this program's operator new: nothing is tested";
  EXPECT_STREQ(last_error(), "cannot record_stream on the device holding it: std::bad_alloc");
  EXPECT_THAT(said, HasSubstr("plimsoll: cannot record_stream on the device holding it: std::bad_alloc\n"));

  ::testing::internal::CaptureStderr();
  {
    const ScopedFailures failures;  // every allocation fails: only fixed texts can be said
    EXPECT_EQ(record_stream(&local, -1, nullptr), -1);
  }
  said = ::testing::internal::GetCapturedStderr();
  EXPECT_STREQ(last_error(), "unexpected failure (out of host memory?)");
  EXPECT_THAT(said, HasSubstr("plimsoll: cannot record_stream on the device holding it: unexpected failure\n"));

  // The same on a thread of its own, whose kept reason is new, with no room for the fixed text: that text is kept
  // without copying it (before, copying it failed and last_error() said "").
  ::testing::internal::CaptureStderr();
  std::thread([&] {
    {
      const ScopedFailures failures;
      EXPECT_EQ(record_stream(&local, -1, nullptr), -1);
    }
    EXPECT_STREQ(last_error(), "unexpected failure (out of host memory?)");
  }).join();
  ::testing::internal::GetCapturedStderr();

  ::testing::internal::CaptureStderr();
  EXPECT_EQ(record_stream(&local, -1, nullptr), -1) << "with host memory again, the reason itself";
  ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(last_error(), HasSubstr("no device of plimsoll's holds a live allocation"));
}

}  // namespace
