#pragma once
// Pause and resume requests through a ledger entry (ledger_layout.hpp, ControlKind): `plimsoll pause PID` posts one,
// the process's responder carries it out and answers, the command waits for the answer. Lock-free: the request and
// the answer are single atomic words, so neither side takes the ledger's lock or can leave it held.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "sharing/ledger_layout.hpp"

namespace plimsoll::sharing {

/// Posts `kind` to the entry (replacing a request not answered yet); returns its sequence.
std::uint64_t post_control(LedgerEntry& entry, ControlKind kind) noexcept;

/// Takes back request `sequence` of `kind` if it is still the entry's request and not answered: true when it was
/// withdrawn (a process reading it afterwards finds nothing pending).
bool withdraw_control(LedgerEntry& entry, std::uint64_t sequence, ControlKind kind) noexcept;

struct PendingControl {
  ControlKind kind = ControlKind::none;
  std::uint64_t sequence = 0;
};
/// The request not answered yet, if any.
std::optional<PendingControl> pending_control(const LedgerEntry& entry) noexcept;

/// Writes the message (cut to kControlMessageChars - 1), then the answer.
void answer_control(LedgerEntry& entry, std::uint64_t sequence, ControlStatus status, std::string_view message) noexcept;

struct ControlAnswer {
  ControlStatus status = ControlStatus::done;
  std::string message;
  bool superseded = false;  // a later request was answered instead
};
/// The answer to request `sequence`, once given.
std::optional<ControlAnswer> answer_to(const LedgerEntry& entry, std::uint64_t sequence);

}  // namespace plimsoll::sharing
