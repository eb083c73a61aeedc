// A dependency of tests/fake_libcuda/elf_churn.cpp that takes ld.so a long while to relocate (a table of 2^17
// pointers, one relocation each): while dlopen relocates it, its dependant is already mapped and listed by
// dl_iterate_phdr but not relocated yet, the window tests/threads_elf_lookup_test.cpp walks into.
namespace {
int anchor;
}

#define PLIMSOLL_A1 &anchor
#define PLIMSOLL_A4 PLIMSOLL_A1, PLIMSOLL_A1, PLIMSOLL_A1, PLIMSOLL_A1
#define PLIMSOLL_A16 PLIMSOLL_A4, PLIMSOLL_A4, PLIMSOLL_A4, PLIMSOLL_A4
#define PLIMSOLL_A64 PLIMSOLL_A16, PLIMSOLL_A16, PLIMSOLL_A16, PLIMSOLL_A16
#define PLIMSOLL_A256 PLIMSOLL_A64, PLIMSOLL_A64, PLIMSOLL_A64, PLIMSOLL_A64
#define PLIMSOLL_A1024 PLIMSOLL_A256, PLIMSOLL_A256, PLIMSOLL_A256, PLIMSOLL_A256
#define PLIMSOLL_A4096 PLIMSOLL_A1024, PLIMSOLL_A1024, PLIMSOLL_A1024, PLIMSOLL_A1024
#define PLIMSOLL_A16384 PLIMSOLL_A4096, PLIMSOLL_A4096, PLIMSOLL_A4096, PLIMSOLL_A4096
#define PLIMSOLL_A65536 PLIMSOLL_A16384, PLIMSOLL_A16384, PLIMSOLL_A16384, PLIMSOLL_A16384

extern "C" {
__attribute__((visibility("default"))) int* plimsoll_slow_table[] = {PLIMSOLL_A65536, PLIMSOLL_A65536};
/// 7 once relocated; read through the GOT of elf_churn.cpp's resolver (another object's variable).
__attribute__((visibility("default"))) int plimsoll_slow_ready = 7;
}
