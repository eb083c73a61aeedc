// A library whose indirect function's resolver calls back into the test (a hook it sets): elf_lookup calls that
// resolver in the middle of a walk, so a dlsym(RTLD_NEXT, ...) the hook makes comes back into elf_lookup on the same
// thread while the walk's buffers are in use (tests/integrations_elf_lookup_test.cpp).
namespace {
using Hook = void (*)();
Hook hook = nullptr;
int reentered() { return 7; }
}  // namespace

extern "C" {
/// Sets the function the resolver calls (null: none).
__attribute__((visibility("default"))) void plimsoll_reentrant_set_hook(Hook function) { hook = function; }

using Reentered = int (*)();
__attribute__((no_sanitize("address", "undefined", "thread"))) Reentered plimsoll_reentrant_resolve() {
  if (hook != nullptr) hook();
  return &reentered;
}

__attribute__((visibility("default"))) int plimsoll_reentrant_ifunc() __attribute__((ifunc("plimsoll_reentrant_resolve")));
}
