// elf_lookup (src/integrations/cuda_intercept/elf_lookup.hpp), checked against glibc's own dlsym in this process:
// libc's and libm's symbols (indirect functions and versioned ones among them) found where dlsym finds them, an
// absent symbol and an imported (undefined) one not found, the default version chosen over a hidden one, and the
// RTLD_NEXT rule for a caller loaded at start answering what dlsym(RTLD_NEXT, ...) answers here.
#include <dlfcn.h>
#include <link.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

#include <gtest/gtest.h>

#include "elf_lookup.hpp"

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
  // The program's own definition is never its next one: main is defined here and nowhere after it.
  EXPECT_EQ(next_from_here("main"), nullptr);
}

TEST(ElfLookup, ACallerInNoLoadedObjectGetsNothing) {
  EXPECT_EQ(plimsoll::elf_lookup::next_definition(reinterpret_cast<const void*>(std::uintptr_t{16}), "malloc"),
            nullptr);
}

}  // namespace
