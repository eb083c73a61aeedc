// elf_lookup (src/integrations/cuda_intercept/elf_lookup.hpp), checked against glibc's own dlsym in this process:
// libc's and libm's symbols (indirect functions and versioned ones among them) found where dlsym finds them, an
// absent symbol and an imported (undefined) one not found, the default version chosen over a hidden one, and the
// RTLD_NEXT rule for a caller loaded at start answering what dlsym(RTLD_NEXT, ...) answers here, the vDSO never
// searched, and a library dlopen'ed by a constructor during start-up taken for a dlopen'ed one.
#include <dlfcn.h>
#include <link.h>
#include <time.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

#include <gtest/gtest.h>

#include "elf_lookup.hpp"

// Exported by the program (-Wl,--export-dynamic-symbol in tests/CMakeLists.txt): in its dynamic symbol table, which
// `main` is not.
extern "C" {
__attribute__((visibility("default"))) int plimsoll_elf_test_exported = 1;
}

// tests/fake_libcuda/elf_opener.cpp (linked): the handle of tests/fake_libcuda/elf_asker.cpp, which its constructor
// dlopen'ed while the program started.
extern "C" void* plimsoll_opened_by_constructor();

namespace {

// The loaded object whose file name contains `part`, copied (its fields point into the object, which stays loaded).
std::optional<dl_phdr_info> object_named(const std::string& part) {
  struct Search {
    std::string part;
    std::optional<dl_phdr_info> found;
  } search{part, std::nullopt};
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* data) {
        auto& s = *static_cast<Search*>(data);
        if (info->dlpi_name != nullptr && std::string(info->dlpi_name).find(s.part) != std::string::npos) {
          s.found = *info;
          return 1;
        }
        return 0;
      },
      &search);
  return search.found;
}

void* handle_of(const char* soname) { return dlopen(soname, RTLD_LAZY | RTLD_NOLOAD); }

TEST(ElfLookup, FindsLibcAndLibmSymbolsWhereDlsymDoes) {
  const auto libc = object_named("libc.so.6");
  const auto libm = object_named("libm.so.6");
  ASSERT_TRUE(libc && libm) << "the test links libc and libm";
  void* const libc_handle = handle_of("libc.so.6");
  void* const libm_handle = handle_of("libm.so.6");
  ASSERT_NE(libc_handle, nullptr);
  ASSERT_NE(libm_handle, nullptr);
  // memcpy and strlen are indirect functions on x86-64 (their resolver picks the CPU's version); environ is data.
  for (const char* name : {"malloc", "free", "memcpy", "strlen", "printf", "environ", "pthread_create", "dl_iterate_phdr"}) {
    void* const expected = dlsym(libc_handle, name);
    ASSERT_NE(expected, nullptr) << name;
    EXPECT_EQ(plimsoll::elf_lookup::find_symbol(*libc, name), expected) << name;
  }
  for (const char* name : {"cos", "sqrt", "exp", "log", "pow"}) {
    void* const expected = dlsym(libm_handle, name);
    ASSERT_NE(expected, nullptr) << name;
    EXPECT_EQ(plimsoll::elf_lookup::find_symbol(*libm, name), expected) << name;
  }
  dlclose(libc_handle);
  dlclose(libm_handle);
}

TEST(ElfLookup, AnAbsentOrImportedSymbolIsNotFound) {
  const auto libc = object_named("libc.so.6");
  const auto libstdcxx = object_named("libstdc++.so");
  ASSERT_TRUE(libc && libstdcxx);
  EXPECT_EQ(plimsoll::elf_lookup::find_symbol(*libc, "plimsoll_no_such_symbol"), nullptr);
  EXPECT_EQ(plimsoll::elf_lookup::find_symbol(*libc, "cos"), nullptr) << "libm's, not libc's";
  EXPECT_EQ(plimsoll::elf_lookup::find_symbol(*libc, ""), nullptr);
  // libstdc++ calls malloc: an undefined entry in its table, which is no definition.
  EXPECT_EQ(plimsoll::elf_lookup::find_symbol(*libstdcxx, "malloc"), nullptr);
  EXPECT_NE(plimsoll::elf_lookup::find_symbol(*libstdcxx, "_ZSt9terminatev"), nullptr) << "std::terminate()";
}

TEST(ElfLookup, TheDefaultVersionIsChosenOverAHiddenOne) {
#if defined(__x86_64__)
  // On x86-64, libm's exp has GLIBC_2.29 as its default version and GLIBC_2.2.5 as an old, hidden one; libc's memcpy
  // has GLIBC_2.14 and the hidden GLIBC_2.2.5 (memmove's behaviour).
  const auto libm = object_named("libm.so.6");
  const auto libc = object_named("libc.so.6");
  ASSERT_TRUE(libm && libc);
  void* const libm_handle = handle_of("libm.so.6");
  void* const libc_handle = handle_of("libc.so.6");
  void* const old_exp = dlvsym(libm_handle, "exp", "GLIBC_2.2.5");
  void* const new_exp = dlvsym(libm_handle, "exp", "GLIBC_2.29");
  ASSERT_TRUE(old_exp && new_exp && old_exp != new_exp) << "this glibc has both versions of exp";
  EXPECT_EQ(plimsoll::elf_lookup::find_symbol(*libm, "exp"), new_exp);
  void* const old_memcpy = dlvsym(libc_handle, "memcpy", "GLIBC_2.2.5");
  void* const new_memcpy = dlvsym(libc_handle, "memcpy", "GLIBC_2.14");
  ASSERT_TRUE(old_memcpy && new_memcpy && old_memcpy != new_memcpy);
  EXPECT_EQ(plimsoll::elf_lookup::find_symbol(*libc, "memcpy"), new_memcpy);
  dlclose(libm_handle);
  dlclose(libc_handle);
#else
  GTEST_SKIP() << "the versions checked (exp@GLIBC_2.2.5, memcpy@GLIBC_2.2.5) are x86-64's";
#endif
}

// Out of line, so that its return address lies in this test program, as a real caller's does.
__attribute__((noinline)) void* next_from_here(const char* name) {
  return plimsoll::elf_lookup::next_definition(__builtin_return_address(0), name);
}

TEST(ElfLookup, NextDefinitionForAProgramAnswersWhatDlsymRtldNextDoes) {
  for (const char* name : {"malloc", "free", "memcpy", "cos", "exp", "pthread_create", "_ZSt9terminatev"}) {
    void* const expected = dlsym(RTLD_NEXT, name);
    ASSERT_NE(expected, nullptr) << name;
    EXPECT_EQ(next_from_here(name), expected) << name;
  }
  EXPECT_EQ(next_from_here("plimsoll_no_such_symbol"), nullptr);
}

TEST(ElfLookup, TheProgramsOwnDefinitionIsNeverItsNextOne) {
  // plimsoll_elf_test_exported is in the program's dynamic symbol table (find_symbol sees it) and nowhere after it.
  // dl_iterate_phdr lists the program first (under an empty name).
  std::optional<dl_phdr_info> program;
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* data) {
        *static_cast<std::optional<dl_phdr_info>*>(data) = *info;
        return 1;
      },
      &program);
  ASSERT_TRUE(program);
  ASSERT_NE(plimsoll::elf_lookup::find_symbol(*program, "plimsoll_elf_test_exported"), nullptr)
      << "the program exports it (tests/CMakeLists.txt)";
  EXPECT_EQ(plimsoll::elf_lookup::find_symbol(*program, "plimsoll_elf_test_exported"),
            static_cast<void*>(&plimsoll_elf_test_exported));
  EXPECT_EQ(dlsym(RTLD_NEXT, "plimsoll_elf_test_exported"), nullptr);
  EXPECT_EQ(next_from_here("plimsoll_elf_test_exported"), nullptr);
}

TEST(ElfLookup, TheVdsoIsNeverSearched) {
  // The vDSO comes right after the program in load order and defines clock_gettime; glibc never searches it, so the
  // program's next clock_gettime is libc's.
  void* const libc = handle_of("libc.so.6");
  ASSERT_NE(libc, nullptr);
  void* const libc_clock_gettime = dlsym(libc, "clock_gettime");
  ASSERT_NE(libc_clock_gettime, nullptr);
  EXPECT_EQ(dlsym(RTLD_NEXT, "clock_gettime"), libc_clock_gettime);
  EXPECT_EQ(next_from_here("clock_gettime"), libc_clock_gettime);
  EXPECT_EQ(next_from_here("gettimeofday"), dlsym(libc, "gettimeofday"));
  dlclose(libc);
}

TEST(ElfLookup, ALibraryDlopenedByAConstructorAtStartIsADlopenedOne) {
  // elf_opener's constructor dlopen'ed elf_asker before any of the program's constructors ran. glibc searches the
  // asker's own scope (it, then libc) for its RTLD_NEXT, and so must elf_lookup: the objects after it in load order
  // (none) would answer null.
  void* const asker = plimsoll_opened_by_constructor();
  ASSERT_NE(asker, nullptr) << "elf_opener's constructor could not dlopen elf_asker";
  using AskElfLookup = void* (*)(void* (*)(const void*, const char*));
  using AskGlibc = void* (*)();
  const auto ask = reinterpret_cast<AskElfLookup>(dlsym(asker, "plimsoll_asker_next"));
  const auto ask_glibc = reinterpret_cast<AskGlibc>(dlsym(asker, "plimsoll_asker_glibc_next"));
  ASSERT_TRUE(ask != nullptr && ask_glibc != nullptr);
  void* const libc = handle_of("libc.so.6");
  ASSERT_NE(libc, nullptr);
  void* const libc_getppid = dlsym(libc, "getppid");
  EXPECT_EQ(ask_glibc(), libc_getppid);
  EXPECT_EQ(ask(&plimsoll::elf_lookup::next_definition), libc_getppid);
  dlclose(libc);
}

// What the reentrant library's resolver saw when it asked for its next malloc (set by its hook).
void* reentrant_answer = reinterpret_cast<void*>(std::uintptr_t{1});

__attribute__((noinline)) void ask_from_the_resolver() { reentrant_answer = next_from_here("malloc"); }

TEST(ElfLookup, AWalkEnteredAgainOnTheSameThreadAnswersNullAndTheOuterWalkStaysRight) {
  void* const library = dlopen(PLIMSOLL_ELF_REENTRANT_SO, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(library, nullptr) << dlerror();
  const auto set_hook = reinterpret_cast<void (*)(void (*)())>(dlsym(library, "plimsoll_reentrant_set_hook"));
  ASSERT_NE(set_hook, nullptr);
  void* const resolved = dlsym(library, "plimsoll_reentrant_ifunc");
  ASSERT_NE(resolved, nullptr);
  set_hook(&ask_from_the_resolver);
  // The walk calls the library's resolver, which asks elf_lookup again on this thread: that inner call must not
  // overwrite the outer walk's buffers, so it answers null, and the outer walk still answers the resolved function.
  EXPECT_EQ(next_from_here("plimsoll_reentrant_ifunc"), resolved);
  EXPECT_EQ(reentrant_answer, nullptr);
  // Outside a walk the same question is answered.
  ask_from_the_resolver();
  EXPECT_EQ(reentrant_answer, dlsym(RTLD_NEXT, "malloc"));
  set_hook(nullptr);
  dlclose(library);
}

TEST(ElfLookup, ACallerInNoLoadedObjectGetsNothing) {
  EXPECT_EQ(plimsoll::elf_lookup::next_definition(reinterpret_cast<const void*>(std::uintptr_t{16}), "malloc"),
            nullptr);
}

}  // namespace
