#include "util/asymmetric_fence.hpp"

#if defined(__linux__)
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#if defined(__SANITIZE_THREAD__)
#define PLIMSOLL_UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define PLIMSOLL_UNDER_TSAN 1
#endif
#endif

namespace plimsoll::util {

namespace {

bool register_membarrier() {
#if defined(PLIMSOLL_UNDER_TSAN) || !defined(__linux__) || !defined(SYS_membarrier)
  return false;
#else
  const long supported = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
  if (supported < 0 || (supported & MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return false;
  return syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
#endif
}

}  // namespace

bool AsymmetricFence::asymmetric() {
  static const bool registered = register_membarrier();
  return registered;
}

void AsymmetricFence::heavy(bool asymmetric) noexcept {
#if !defined(PLIMSOLL_UNDER_TSAN) && defined(__linux__) && defined(SYS_membarrier)
  // Registered, the command cannot fail (it fails only for a process that never registered).
  if (asymmetric && syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0) return;
#endif
  (void)asymmetric;
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

}  // namespace plimsoll::util
