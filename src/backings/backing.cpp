// The steps every backing shares (the contract in backing.hpp): lock, check, act, record.
#include "backings/backing.hpp"

#include <stdexcept>

#include <fmt/format.h>

#include "plimsoll/error.hpp"
#include "util/checked_math.hpp"

namespace plimsoll::backings {
namespace {

std::uint64_t validated_granularity(std::string_view kind, std::uint64_t granularity) {
  if (!util::is_power_of_two(granularity))
    throw InvalidArgument(fmt::format("{} backing granularity {} bytes is not a power of two; use one such as 2 MiB",
                                      kind, granularity));
  return granularity;
}

}  // namespace

Backing::Backing(std::string_view kind, std::uint64_t granularity)
    : kind_(kind), granularity_(validated_granularity(kind, granularity)), ledger_(granularity_) {}

void Backing::throw_misuse(const std::string& problem) const {
  throw std::logic_error(fmt::format("plimsoll: {} backing misused (a bug in plimsoll's engine): {}", kind_, problem));
}

std::uintptr_t Backing::reserve(std::uint64_t bytes) {
  const std::lock_guard lock(mutex_);
  if (auto problem = ledger_.reserve_problem(bytes); !problem.empty()) throw_misuse(problem);
  // Out of host memory, std::bad_alloc here, before anything is reserved: the books never allocate after the hook
  // acted (nor does recording a map or an unmap, which allocates nothing at all).
  ledger_.make_room_for_reservation(bytes);
  const std::uintptr_t base = do_reserve(bytes);
  if (base == 0) return 0;
  if (!util::is_aligned(base, granularity_)) {
    do_unreserve(base, bytes);
    throw_misuse(fmt::format("reserve of {} bytes returned {:#x}, which is not aligned to the granularity ({} bytes)",
                             bytes, base, granularity_));
  }
  ledger_.record_reserve(base, bytes);
  return base;
}

void Backing::unreserve(std::uintptr_t base, std::uint64_t bytes) noexcept {
  const std::lock_guard lock(mutex_);
  if (auto problem = ledger_.unreserve_problem(base, bytes); !problem.empty())
    abort_on_contract_violation(kind_, problem);
  if (const std::uint64_t still_mapped = ledger_.mapped_bytes_in(base, base + bytes); still_mapped != 0)
    abort_on_contract_violation(
        kind_, fmt::format("unreserve of {:#x}: {} bytes inside are still mapped; unmap() them first", base,
                           still_mapped));
  do_unreserve(base, bytes);
  ledger_.record_unreserve(base, bytes);
}

bool Backing::map(std::uintptr_t addr, std::uint64_t bytes) {
  const std::lock_guard lock(mutex_);
  if (auto problem = ledger_.map_problem(addr, bytes); !problem.empty()) throw_misuse(problem);
  if (!do_map(addr, bytes)) return false;
  ledger_.record_map(addr, bytes);
  mapped_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  return true;
}

void Backing::unmap(std::uintptr_t addr, std::uint64_t bytes) noexcept {
  const std::lock_guard lock(mutex_);
  if (auto problem = ledger_.unmap_problem(addr, bytes); !problem.empty()) abort_on_contract_violation(kind_, problem);
  do_unmap(addr, bytes);
  ledger_.record_unmap(addr, bytes);
  mapped_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
}

HostPages Backing::host_pages() const {
  const std::lock_guard lock(mutex_);
  return do_host_pages();
}

void Backing::lock_for_fork() noexcept {
  lock_self_for_fork();
  lock_rest_for_fork();
}

// Counted: logical devices' views share one backing, so one fork reaches it once per view (a std::mutex taken
// twice by one thread deadlocks). Only the forking thread touches the counts, under the handlers' outer registry.
void Backing::lock_self_for_fork() noexcept {
  if (fork_self_holds_++ == 0) mutex_.lock();  // NOLINT: released by unlock_after_fork, after the fork
}

void Backing::lock_rest_for_fork() noexcept {
  if (fork_rest_holds_++ != 0) return;
  do_lock_upstream_for_fork();
  do_lock_own_for_fork();
}

void Backing::unlock_after_fork() noexcept {
  if (--fork_rest_holds_ == 0) {
    do_unlock_own_after_fork();
    do_unlock_upstream_after_fork();
  }
  if (--fork_self_holds_ == 0) mutex_.unlock();
}

}  // namespace plimsoll::backings
