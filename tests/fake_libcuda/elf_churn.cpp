// A library with an indirect function (IFUNC) whose resolver reads a variable of its dependency through its own GOT,
// as glibc's and CUDA's resolvers read their CPU tables: called before ld.so has relocated this object, the GOT entry
// is still 0 and the resolver faults. tests/threads_elf_lookup_test.cpp opens and closes it while other threads ask
// elf_lookup for plimsoll_churn_ifunc, which only this library defines.
extern "C" {
extern int plimsoll_slow_ready;  // tests/fake_libcuda/elf_slow_dependency.cpp

namespace {
int churned() { return 42; }
}  // namespace

using Churned = int (*)();
__attribute__((no_sanitize("address", "undefined", "thread"))) Churned plimsoll_churn_resolve() { return plimsoll_slow_ready == 7 ? &churned : nullptr; }

__attribute__((visibility("default"))) int plimsoll_churn_ifunc() __attribute__((ifunc("plimsoll_churn_resolve")));
}
