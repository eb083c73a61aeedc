// elf_lookup's RTLD_NEXT walk (src/integrations/cuda_intercept/elf_lookup.hpp) from several threads while another
// loads and unloads a library: the walk runs under the loader's lock (inside dl_iterate_phdr), so an object being
// closed is never read, and every thread gets libc's definition every time.
#include <dlfcn.h>

#include <atomic>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "elf_lookup.hpp"

namespace {

__attribute__((noinline)) void* next_from_here(const char* name) {
  return plimsoll::elf_lookup::next_definition(__builtin_return_address(0), name);
}

TEST(ElfLookupThreads, RtldNextWalksStayCorrectWhileALibraryIsOpenedAndClosed) {
  void* const libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
  ASSERT_NE(libc, nullptr);
  void* const libc_malloc = dlsym(libc, "malloc");
  void* const libc_getppid = dlsym(libc, "getppid");
  std::atomic<bool> done{false};
  std::atomic<int> wrong{0}, opened{0};
  // The probe library defines getppid itself and asks dlsym(RTLD_NEXT, "getppid"): each open adds an object after
  // this program, each close removes it again while the walkers run.
  std::thread loader([&] {
    for (int round = 0; round < 200; ++round) {
      void* const probe = dlopen(PLIMSOLL_NEXT_PROBE_SO, RTLD_NOW | RTLD_LOCAL);
      if (probe == nullptr) {
        wrong.fetch_add(1000);
        break;
      }
      // The probe's own walk (a dlopen'ed caller: its dependencies' scope) must find libc's getppid.
      auto* const ask = reinterpret_cast<void* (*)()>(dlsym(probe, "plimsoll_next_probe"));
      if (ask == nullptr || ask() != libc_getppid) wrong.fetch_add(1);
      opened.fetch_add(1);
      dlclose(probe);
    }
    done.store(true);
  });
  std::vector<std::thread> walkers;
  for (int t = 0; t < 4; ++t) {
    walkers.emplace_back([&] {
      while (!done.load()) {
        if (next_from_here("malloc") != libc_malloc) wrong.fetch_add(1);
        if (next_from_here("getppid") != libc_getppid) wrong.fetch_add(1);
      }
    });
  }
  loader.join();
  for (std::thread& walker : walkers) walker.join();
  EXPECT_EQ(opened.load(), 200);
  EXPECT_EQ(wrong.load(), 0);
  dlclose(libc);
}

}  // namespace
