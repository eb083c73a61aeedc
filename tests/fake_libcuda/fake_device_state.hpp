#pragma once
// The fake GPU's memory as the fake libcuda.so.1 keeps it: in a file (PLIMSOLL_FAKE_CUDA_STATE) that every process
// using the fake GPU maps, so that, like a real GPU, its capacity is shared between processes and a process's
// memory is freed when it dies. Tests map it too, to check from the "driver's" own count what the ledger claims.
// Without PLIMSOLL_FAKE_CUDA_STATE the state lives in the process (one process, no file).
#include <atomic>
#include <cstdint>

namespace plimsoll::fake_cuda {

inline constexpr std::uint64_t kStateMagic = 0x46414b4543554441ULL;  // "FAKECUDA"
inline constexpr int kStateSlots = 256;

struct ProcessSlot {
  std::atomic<std::int32_t> pid;
  std::atomic<std::uint64_t> start_time;  // /proc/PID/stat field 22: a reused pid is another process
  std::atomic<std::uint64_t> bytes;       // what the process holds (its context included)
};

struct DeviceState {
  std::atomic<std::uint64_t> magic;
  std::atomic<std::uint64_t> capacity;        // the GPU's memory (PLIMSOLL_FAKE_CUDA_BYTES of the first process)
  std::atomic<std::uint64_t> peak_used;       // the highest sum of live processes' bytes after an allocation
  std::atomic<std::uint64_t> allocations;     // successful allocations of every kind
  std::atomic<std::uint64_t> refusals;        // allocations refused for capacity (CUDA_ERROR_OUT_OF_MEMORY)
  std::atomic<std::uint64_t> reclaimed;       // slots of dead processes freed
  ProcessSlot slots[kStateSlots];
};

}  // namespace plimsoll::fake_cuda
