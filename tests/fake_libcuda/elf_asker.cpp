// A library that asks elf_lookup (through the function the test passes in) and glibc what its own
// dlsym(RTLD_NEXT, "getppid") is, with its own code as the caller. tests/fake_libcuda/elf_opener.cpp dlopen's it from a
// constructor, before the program's own constructors run (tests/integrations_elf_lookup_test.cpp).
#include <dlfcn.h>

using NextDefinition = void* (*)(const void*, const char*);

extern "C" __attribute__((visibility("default"))) __attribute__((noinline)) void* plimsoll_asker_next(
    NextDefinition next_definition) {
  return next_definition(reinterpret_cast<const void*>(&plimsoll_asker_next), "getppid");
}

extern "C" __attribute__((visibility("default"))) __attribute__((noinline)) void* plimsoll_asker_glibc_next() {
  void* volatile next = dlsym(RTLD_NEXT, "getppid");
  return next;
}
