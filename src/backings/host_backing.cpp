#include "backings/host_backing.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <limits>
#include <vector>

#include <fmt/format.h>

#include "plimsoll/device.hpp"
#include "plimsoll/error.hpp"
#include "plimsoll/size.hpp"

namespace plimsoll::backings {
namespace {

std::uint64_t system_page_size() { return static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE)); }

std::uint64_t validated_granularity(std::uint64_t granularity) {
  const std::uint64_t page = system_page_size();
  if (!util::is_power_of_two(granularity) || granularity < page)
    throw InvalidArgument(fmt::format(
        "host backing granularity {} bytes is not a power-of-two multiple of the page size ({} bytes); "
        "use a power of two of at least {} bytes, such as 2 MiB", granularity, page, page));
  return granularity;
}

void* pointer(std::uintptr_t addr) { return reinterpret_cast<void*>(addr); }

constexpr int kAddressSpaceOnly = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;

// Mapping fresh PROT_NONE pages over the range, rather than madvise(MADV_DONTNEED) then
// mprotect(PROT_NONE), is one syscall instead of two, and the only one of the two ways that gives back the
// commit charge: under strict overcommit (vm.overcommit_memory=2, where MAP_NORESERVE is ignored) the kernel
// charges a private mapping when mprotect() makes it writable, and once it has been written to, cannot
// uncharge it when it merely becomes unwritable again; replacing the mapping frees the old one, its pages
// and its charge together.
void release_pages(std::uintptr_t addr, std::uint64_t bytes) noexcept {
  void* replaced = ::mmap(pointer(addr), bytes, PROT_NONE, MAP_FIXED | kAddressSpaceOnly, -1, 0);
  if (replaced != MAP_FAILED) return;
  // Only when the kernel cannot split the mapping (vm.max_map_count reached): the pages still go back,
  // though the commit charge stays until the reservation is released.
  ::madvise(pointer(addr), bytes, MADV_DONTNEED);
  ::mprotect(pointer(addr), bytes, PROT_NONE);
}

}  // namespace

HostBacking::HostBacking(std::uint64_t granularity, std::optional<std::uint64_t> capacity_bytes)
    : Backing("host", validated_granularity(granularity)),
      capacity_(capacity_bytes ? *capacity_bytes : scan_host().limit_bytes()),
      page_size_(system_page_size()) {}

HostBacking::~HostBacking() {
  ledger().for_each_reservation([](std::uintptr_t base, std::uint64_t bytes) { ::munmap(pointer(base), bytes); });
}

std::uintptr_t HostBacking::do_reserve(std::uint64_t bytes) {
  const std::uint64_t granule = granularity();
  if (bytes > std::numeric_limits<std::uint64_t>::max() - granule) return 0;
  // mmap only promises page alignment: ask for enough to hold an aligned range, then cut off both ends.
  const std::uint64_t padded = bytes + granule - page_size_;
  void* raw = ::mmap(nullptr, padded, PROT_NONE, kAddressSpaceOnly, -1, 0);
  if (raw == MAP_FAILED) return 0;
  const auto raw_begin = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t base = util::align_up(raw_begin, granule);
  const std::uintptr_t raw_end = raw_begin + padded;
  if (base > raw_begin) ::munmap(raw, base - raw_begin);
  if (raw_end > base + bytes) ::munmap(pointer(base + bytes), raw_end - (base + bytes));
  return base;
}

void HostBacking::do_unreserve(std::uintptr_t base, std::uint64_t bytes) noexcept { ::munmap(pointer(base), bytes); }

bool HostBacking::do_map(std::uintptr_t addr, std::uint64_t bytes) {
  const std::uint64_t committed = mapped_bytes();
  if (bytes > capacity_ || committed > capacity_ - bytes) return false;
  // Pages stay out of RAM until first touched; touching them here would defeat lazy commit.
  if (::mprotect(pointer(addr), bytes, PROT_READ | PROT_WRITE) != 0) {
    // The kernel may have changed part of the range before failing (ENOMEM): put all of it back.
    release_pages(addr, bytes);
    return false;
  }
  return true;
}

void HostBacking::do_unmap(std::uintptr_t addr, std::uint64_t bytes) noexcept { release_pages(addr, bytes); }

BackingMemory HostBacking::do_memory() const {
  const std::uint64_t committed = mapped_bytes();
  const std::uint64_t unused = capacity_ > committed ? capacity_ - committed : 0;
  return {.total_bytes = capacity_, .free_bytes = std::min(unused, scan_host().available_ram_bytes)};
}

HostPages HostBacking::do_host_pages() const {
  return {.committed_bytes = mapped_bytes(), .resident_bytes = resident_bytes_locked()};
}

std::uint64_t HostBacking::resident_bytes_locked() const {
  // Only mapped ranges can hold pages (unmap drops them), so reservations' unmapped parts are skipped.
  constexpr std::uint64_t kPagesPerCall = 64 * 1024;  // bounds the buffer whatever the heap's size
  std::vector<unsigned char> in_ram;
  std::uint64_t resident_pages = 0;
  ledger().for_each_mapped([&](std::uintptr_t begin, std::uintptr_t end) {
    for (std::uintptr_t chunk = begin; chunk < end;) {
      const std::uint64_t pages = std::min((end - chunk) / page_size_, kPagesPerCall);
      in_ram.resize(pages);
      if (::mincore(pointer(chunk), pages * page_size_, in_ram.data()) == 0)
        resident_pages += static_cast<std::uint64_t>(
            std::count_if(in_ram.begin(), in_ram.end(), [](unsigned char page) { return (page & 1U) != 0; }));
      chunk += pages * page_size_;
    }
  });
  return resident_pages * page_size_;
}

std::string HostBacking::do_describe() const {
  return fmt::format("host memory (capacity {}, granularity {})", format_size(capacity_), format_size(granularity()));
}

}  // namespace plimsoll::backings
