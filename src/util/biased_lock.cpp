#include "util/biased_lock.hpp"

namespace plimsoll::util::detail {

namespace {
std::atomic<std::uint64_t> next_thread_token{1};
}  // namespace

std::uint64_t assign_thread_token() noexcept {
  t_thread_token = next_thread_token.fetch_add(1, std::memory_order_relaxed);
  return t_thread_token;
}

}  // namespace plimsoll::util::detail
