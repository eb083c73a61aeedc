// Linked into tests/integrations_elf_lookup_test: its constructor dlopen's tests/fake_libcuda/elf_asker.cpp while the
// program starts, so the asker is mapped before any constructor of the program (or a preload) has run, yet glibc
// counts it as dlopen'ed: not among the objects loaded at start.
#include <dlfcn.h>

namespace {
void* opened = nullptr;

__attribute__((constructor)) void open_asker() { opened = dlopen(PLIMSOLL_ELF_ASKER_SO, RTLD_NOW | RTLD_LOCAL); }
}  // namespace

/// The asker's handle, or null if the constructor's dlopen failed.
extern "C" __attribute__((visibility("default"))) void* plimsoll_opened_by_constructor() { return opened; }
