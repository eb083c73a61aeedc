#pragma once
// The process's resident memory, as the kernel counts it: what an allocator really costs the machine.
#include <sys/resource.h>

#include <cstdint>
#include <fstream>
#include <string>

namespace plimsoll::bench {

namespace detail {
/// A "Name:   123 kB" line of /proc/self/status, in bytes; 0 when absent.
inline std::uint64_t proc_status_bytes(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string name;
  while (status >> name) {
    if (name == field + ":") {
      std::uint64_t kib = 0;
      status >> kib;
      return kib * 1024;
    }
    status.ignore(1 << 16, '\n');
  }
  return 0;
}
}  // namespace detail

/// The high-water mark of resident memory (VmHWM), falling back to getrusage where /proc has none.
inline std::uint64_t peak_rss_bytes() {
  if (const std::uint64_t bytes = detail::proc_status_bytes("VmHWM")) return bytes;
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<std::uint64_t>(usage.ru_maxrss) * 1024;
}

inline std::uint64_t current_rss_bytes() { return detail::proc_status_bytes("VmRSS"); }

}  // namespace plimsoll::bench
