#include "backings/sim_backing.hpp"

#include <fmt/format.h>

#include "plimsoll/error.hpp"
#include "plimsoll/size.hpp"

namespace plimsoll::backings {
namespace {

std::uint64_t validated_capacity(std::uint64_t capacity_bytes) {
  if (capacity_bytes == 0)
    throw InvalidArgument("a simulated device of 0 bytes cannot hold anything; give it a size, as in sim:16GiB");
  return capacity_bytes;
}

std::uint64_t validated_granularity(std::uint64_t granularity) {
  if (!util::is_power_of_two(granularity))
    throw InvalidArgument(fmt::format(
        "simulated device granularity {} bytes is not a power of two; use one such as 2 MiB", granularity));
  return granularity;
}

}  // namespace

SimBacking::SimBacking(std::uint64_t capacity_bytes, std::uint64_t granularity)
    : Backing("simulated", validated_granularity(granularity)),
      capacity_(validated_capacity(capacity_bytes)),
      next_address_(util::align_up(kFirstAddress, this->granularity())) {}

std::uintptr_t SimBacking::do_reserve(std::uint64_t bytes) {
  // One granule left unreserved after each reservation: a pointer run past its end lands in no
  // reservation, so map() reports it instead of quietly mapping a neighbour's granule.
  const std::uint64_t granule = granularity();
  const std::uint64_t room = kAddressLimit - next_address_;
  if (bytes > room || room - bytes < granule) return 0;
  const std::uintptr_t base = next_address_;
  next_address_ += bytes + granule;
  return base;
}

bool SimBacking::do_map(std::uintptr_t, std::uint64_t bytes) {
  const std::uint64_t available = available_to_us();
  const std::uint64_t mapped = mapped_bytes();
  return mapped <= available && bytes <= available - mapped;
}

std::uint64_t SimBacking::available_to_us() const noexcept {
  const std::uint64_t occupied = occupied_by_others_.load();
  return occupied < capacity_ ? capacity_ - occupied : 0;
}

BackingMemory SimBacking::do_memory() const {
  const std::uint64_t available = available_to_us();
  const std::uint64_t mapped = mapped_bytes();
  return {.total_bytes = capacity_, .free_bytes = mapped < available ? available - mapped : 0};
}

std::string SimBacking::do_describe() const {
  return fmt::format("simulated device (capacity {}, granularity {})", format_size(capacity_),
                     format_size(granularity()));
}

}  // namespace plimsoll::backings
