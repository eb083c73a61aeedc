#include "backings/sim_backing.hpp"

#include <stdexcept>

#include <fmt/format.h>

#include "plimsoll/error.hpp"
#include "plimsoll/size.hpp"

namespace plimsoll::backings {
namespace {

[[noreturn]] void throw_misuse(const std::string& problem) {
  throw std::logic_error("plimsoll: simulated backing misused (a bug in plimsoll's engine): " + problem);
}

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
    : capacity_(validated_capacity(capacity_bytes)),
      granularity_(validated_granularity(granularity)),
      next_address_(util::align_up(kFirstAddress, granularity_)),
      ledger_(granularity_) {}

std::uintptr_t SimBacking::reserve(std::uint64_t bytes) {
  const std::lock_guard lock(mutex_);
  if (auto problem = ledger_.reserve_problem(bytes); !problem.empty()) throw_misuse(problem);
  // One granule left unreserved after each reservation: a pointer run past its end lands in no
  // reservation, so map() reports it instead of quietly mapping a neighbour's granule.
  const std::uint64_t room = kAddressLimit - next_address_;
  if (bytes > room || room - bytes < granularity_) return 0;
  const std::uintptr_t base = next_address_;
  next_address_ += bytes + granularity_;
  ledger_.record_reserve(base, bytes);
  return base;
}

void SimBacking::unreserve(std::uintptr_t base, std::uint64_t bytes) noexcept {
  const std::lock_guard lock(mutex_);
  if (auto problem = ledger_.unreserve_problem(base, bytes); !problem.empty())
    abort_on_contract_violation("simulated", problem);
  if (const std::uint64_t still_mapped = ledger_.record_unreserve(base, bytes); still_mapped != 0)
    abort_on_contract_violation(
        "simulated", fmt::format("unreserve of {:#x}: {} bytes inside are still mapped; unmap() them first", base,
                                 still_mapped));
}

bool SimBacking::map(std::uintptr_t addr, std::uint64_t bytes) {
  const std::lock_guard lock(mutex_);
  if (auto problem = ledger_.map_problem(addr, bytes); !problem.empty()) throw_misuse(problem);
  const std::uint64_t available = available_to_us();
  const std::uint64_t mapped = mapped_.load();
  if (mapped > available || bytes > available - mapped) return false;
  ledger_.record_map(addr, bytes);
  mapped_.fetch_add(bytes);
  return true;
}

void SimBacking::unmap(std::uintptr_t addr, std::uint64_t bytes) noexcept {
  const std::lock_guard lock(mutex_);
  if (auto problem = ledger_.unmap_problem(addr, bytes); !problem.empty())
    abort_on_contract_violation("simulated", problem);
  ledger_.record_unmap(addr, bytes);
  mapped_.fetch_sub(bytes);
}

std::uint64_t SimBacking::available_to_us() const noexcept {
  const std::uint64_t occupied = occupied_by_others_.load();
  return occupied < capacity_ ? capacity_ - occupied : 0;
}

BackingMemory SimBacking::memory() const {
  const std::uint64_t available = available_to_us();
  const std::uint64_t mapped = mapped_.load();
  return {.total_bytes = capacity_, .free_bytes = mapped < available ? available - mapped : 0};
}

std::string SimBacking::describe() const {
  return fmt::format("simulated device (capacity {}, granularity {})", format_size(capacity_),
                     format_size(granularity_));
}

}  // namespace plimsoll::backings
