// A program whose GPU memory comes from plimsoll's Runtime (as `import plimsoll` and the PyTorch library get theirs),
// for the tests of Runtime devices under a share (tests/sharing_runtime_test.cpp): it creates
// Runtime::global().device(argv[1]) over whatever libcuda.so.1 the loader finds (the fake one), allocates argv[2],
// and prints what the GPU ledgers of PLIMSOLL_LEDGER_DIR hold for this process, one line per entry:
//   limit BYTES
//   entry interposed=0|1 can_trim=0|1 charged=BYTES in_use=BYTES
// With a third argument `hold`, it then prints "holding" and keeps the memory until its stdin closes (for
// `plimsoll pause PID`). Errors: "error: MESSAGE" on stderr, exit 1.
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <string>

#include "plimsoll/runtime.hpp"
#include "plimsoll/sharing.hpp"
#include "plimsoll/size.hpp"
#include "sharing/ledger_scan.hpp"

int main(int argc, char** argv) {
  const bool hold = argc == 4 && std::string(argv[3]) == "hold";
  if (argc != 3 && !hold) {
    std::fprintf(stderr, "usage: %s DEVICE SIZE [hold]\n", argv[0]);
    return 2;
  }
  try {
    plimsoll::Allocator& device = plimsoll::Runtime::global().device(argv[1]);
    void* block = device.allocate(plimsoll::parse_size(argv[2]));
    std::printf("limit %llu\n", static_cast<unsigned long long>(device.description().limit_bytes));
    for (const auto& reading : plimsoll::sharing::read_ledgers(plimsoll::ledger_directory())) {
      if (!reading.snapshot) {
        std::printf("unreadable %s: %s\n", reading.path.c_str(), reading.error.c_str());
        continue;
      }
      for (const auto& row : reading.snapshot->processes) {
        if (row.pid != ::getpid()) continue;
        std::printf("entry interposed=%d can_trim=%d charged=%llu in_use=%llu\n", row.interposed ? 1 : 0,
                    row.can_trim ? 1 : 0, static_cast<unsigned long long>(row.charged),
                    static_cast<unsigned long long>(row.in_use));
      }
    }
    if (hold) {
      std::printf("holding\n");
      std::fflush(stdout);
      char ignored[64];
      while (::read(0, ignored, sizeof ignored) > 0) {
      }
    }
    device.deallocate(block);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "error: %s\n", error.what());
    return 1;
  }
  return 0;
}
