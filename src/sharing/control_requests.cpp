#include "sharing/control_requests.hpp"

#include <algorithm>
#include <cstring>

namespace plimsoll::sharing {
namespace {

constexpr std::uint64_t sequence_of(std::uint64_t word) { return word >> 8; }
constexpr std::uint64_t word_of(std::uint64_t sequence, std::uint8_t low) { return (sequence << 8) | low; }

}  // namespace

std::uint64_t post_control(LedgerEntry& entry, ControlKind kind) noexcept {
  std::uint64_t request = entry.control_request.load(std::memory_order_acquire);
  for (;;) {
    const std::uint64_t sequence =
        std::max(sequence_of(request), sequence_of(entry.control_answer.load(std::memory_order_acquire))) + 1;
    if (entry.control_request.compare_exchange_weak(request, word_of(sequence, static_cast<std::uint8_t>(kind)),
                                                    std::memory_order_acq_rel))
      return sequence;
  }
}

bool withdraw_control(LedgerEntry& entry, std::uint64_t sequence, ControlKind kind) noexcept {
  if (sequence_of(entry.control_answer.load(std::memory_order_acquire)) >= sequence) return false;
  std::uint64_t posted = word_of(sequence, static_cast<std::uint8_t>(kind));
  // Back to "nothing asked" (0): the next post still numbers past the last answer.
  return entry.control_request.compare_exchange_strong(posted, 0, std::memory_order_acq_rel);
}

std::optional<PendingControl> pending_control(const LedgerEntry& entry) noexcept {
  const std::uint64_t request = entry.control_request.load(std::memory_order_acquire);
  if (request == 0) return std::nullopt;
  if (sequence_of(entry.control_answer.load(std::memory_order_acquire)) >= sequence_of(request)) return std::nullopt;
  return PendingControl{.kind = static_cast<ControlKind>(request & 0xff), .sequence = sequence_of(request)};
}

void answer_control(LedgerEntry& entry, std::uint64_t sequence, ControlStatus status,
                    std::string_view message) noexcept {
  char text[kControlMessageChars] = {};
  std::memcpy(text, message.data(), std::min(message.size(), kControlMessageChars - 1));
  for (std::size_t word = 0; word < kControlMessageChars / 8; ++word) {
    std::uint64_t bits = 0;
    std::memcpy(&bits, text + word * 8, 8);
    entry.control_message[word].store(bits, std::memory_order_relaxed);
  }
  entry.control_answer.store(word_of(sequence, static_cast<std::uint8_t>(status)), std::memory_order_release);
}

std::optional<ControlAnswer> answer_to(const LedgerEntry& entry, std::uint64_t sequence) {
  const std::uint64_t answer = entry.control_answer.load(std::memory_order_acquire);
  if (sequence_of(answer) < sequence) return std::nullopt;
  ControlAnswer result;
  result.superseded = sequence_of(answer) > sequence;
  result.status = static_cast<ControlStatus>(answer & 0xff);
  char text[kControlMessageChars + 1] = {};
  for (std::size_t word = 0; word < kControlMessageChars / 8; ++word) {
    const std::uint64_t bits = entry.control_message[word].load(std::memory_order_relaxed);
    std::memcpy(text + word * 8, &bits, 8);
  }
  result.message = text;
  return result;
}

}  // namespace plimsoll::sharing
