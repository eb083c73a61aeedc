// elf_lookup's RTLD_NEXT walk (src/integrations/cuda_intercept/elf_lookup.hpp) from several threads while another
// loads and unloads a library that defines what they ask for: the walk runs under the loader's lock (inside
// dl_iterate_phdr), so an object being closed is never read; an object another thread's dlopen has mapped but not yet
// relocated is not searched (its indirect function's resolver would read an unrelocated GOT and fault).
#include <dlfcn.h>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "elf_lookup.hpp"

namespace {

__attribute__((noinline)) void* next_from_here(const char* name) {
  return plimsoll::elf_lookup::next_definition(__builtin_return_address(0), name);
}

// Addresses seen by one side, compared after the threads are joined.
struct Seen {
  std::mutex mutex;
  std::set<void*> addresses;
  void add(void* address) {
    const std::lock_guard<std::mutex> lock(mutex);
    addresses.insert(address);
  }
};

TEST(ElfLookupThreads, RtldNextWalksStayCorrectWhileALibraryIsOpenedAndClosed) {
  void* const libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
  ASSERT_NE(libc, nullptr);
  void* const libc_getppid = dlsym(libc, "getppid");
  std::atomic<bool> done{false};
  std::atomic<int> wrong{0}, opened{0};
  Seen loader_saw, walkers_got;
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
      loader_saw.add(reinterpret_cast<void*>(ask));
      opened.fetch_add(1);
      dlclose(probe);
    }
    done.store(true);
  });
  // The walkers ask for what only the probe defines, so every walk reads the object being opened and closed: null
  // while it is not loaded, else the probe's own function, never anything else.
  std::vector<std::thread> walkers;
  for (int t = 0; t < 4; ++t) {
    walkers.emplace_back([&] {
      while (!done.load()) {
        if (void* const found = next_from_here("plimsoll_next_probe")) walkers_got.add(found);
      }
    });
  }
  loader.join();
  for (std::thread& walker : walkers) walker.join();
  EXPECT_EQ(opened.load(), 200);
  EXPECT_EQ(wrong.load(), 0);
  for (void* const address : walkers_got.addresses) {
    EXPECT_EQ(loader_saw.addresses.count(address), 1u) << address << " is no plimsoll_next_probe the loader saw";
  }
  dlclose(libc);
}

TEST(ElfLookupThreads, AnObjectNotYetRelocatedIsNotSearched) {
  // Once its dlopen has returned, the churned library's indirect function is found and resolved as dlsym resolves it.
  void* const churn = dlopen(PLIMSOLL_ELF_CHURN_SO, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(churn, nullptr) << dlerror();
  void* const resolved = dlsym(churn, "plimsoll_churn_ifunc");
  ASSERT_NE(resolved, nullptr);
  EXPECT_EQ(next_from_here("plimsoll_churn_ifunc"), resolved);
  EXPECT_EQ(reinterpret_cast<int (*)()>(resolved)(), 42);
  dlclose(churn);
  // While another thread opens it, dl_iterate_phdr lists it as soon as it is mapped, and its slow dependency keeps
  // it unrelocated a while: a walk that called its resolver then would fault (its GOT entry is still 0).
  std::atomic<bool> done{false};
  std::atomic<int> failed_opens{0};
  std::atomic<long> found{0};
  std::thread loader([&] {
    for (int round = 0; round < 300; ++round) {
      void* const handle = dlopen(PLIMSOLL_ELF_CHURN_SO, RTLD_NOW | RTLD_LOCAL);
      if (handle == nullptr) {
        failed_opens.fetch_add(1);
        continue;
      }
      dlclose(handle);
    }
    done.store(true);
  });
  std::thread walker([&] {
    while (!done.load()) {
      if (next_from_here("plimsoll_churn_ifunc") != nullptr) found.fetch_add(1);
    }
  });
  loader.join();
  walker.join();
  EXPECT_EQ(failed_opens.load(), 0);
  // How often a walk met the library relocated is timing: only reported.
  RecordProperty("found_relocated", static_cast<int>(found.load()));
}

}  // namespace
