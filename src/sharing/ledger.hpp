#pragma once
// A GPU's ledger, for a process that writes it: joining with a share and cap, charging and crediting bytes under
// the robust lock, asking borrowers to trim, and removing the entries of processes that died.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "sharing/admission.hpp"
#include "sharing/ledger_file.hpp"
#include "sharing/process_identity.hpp"

namespace plimsoll::sharing {

struct Member {
  ProcessIdentity who;
  std::uint64_t share = 0;
  std::uint64_t cap = 0;
  bool can_trim = false;    // a plimsoll engine: gives cached memory back when asked
  bool interposed = false;  // governed at the driver
  std::string command;
};

struct ChargeResult {
  Verdict verdict = Verdict::admitted;
  std::uint64_t headroom = 0;     // what could have been charged (on refusal)
  std::uint32_t trims_asked = 0;  // processes asked to give memory back (needs_trim)
};

class Ledger {
 public:
  static constexpr std::chrono::milliseconds kReclaimInterval{20};

  explicit Ledger(LedgerFile file);

  /// Adds `member`, first removing entries of dead processes. Returns its slot. Throws plimsoll::Error when the
  /// shares would pass the GPU's limit (naming who holds them), the cap passes the limit, or all slots are taken.
  int join(const Member& member);
  /// Removes the slot; what it held counts free at once.
  void leave(int slot) noexcept;

  /// Charges `bytes` when admission allows (else counts a refusal and, for needs_trim, asks the borrowers).
  /// A refusal first removes dead processes' entries and decides again (at most every kReclaimInterval).
  /// `count` false: a try that is not counted as a refusal (charge_waiting_for_trims counts only its last).
  ChargeResult charge(int slot, std::uint64_t bytes, bool count = true);
  void release(int slot, std::uint64_t bytes) noexcept;
  /// Charged whatever the budget says: memory the process already holds (its CUDA context).
  void charge_unconditionally(int slot, std::uint64_t bytes, bool is_context) noexcept;
  /// Live bytes, for processes that know them apart from what they hold (an engine's in use vs reserved).
  void set_in_use(int slot, std::uint64_t bytes) noexcept;

  std::uint64_t headroom(int slot);
  std::uint64_t charged(int slot) const noexcept;
  /// What the other processes hold together.
  std::uint64_t others_charged(int slot) const noexcept;
  std::uint64_t limit() const noexcept { return file_.layout().header.limit_bytes; }

  bool trim_requested(int slot) const noexcept;
  /// Clears the request and counts a trim.
  void trim_done(int slot) noexcept;

  /// Takes the context token for `who` (see LedgerHeader): true when it is now theirs (free, theirs already, or its
  /// holder died). Release it with release_context_token once the context is measured.
  bool take_context_token(const ProcessIdentity& who);
  void release_context_token(const ProcessIdentity& who) noexcept;

  /// Removes entries whose process is gone (pid and start time); returns how many.
  std::size_t reclaim_dead();

  const LedgerFile& file() const noexcept { return file_; }

 private:
  template <typename Body>
  auto locked(Body&& body);
  void repair() noexcept;
  LedgerTotals totals() const noexcept;
  Holder holder(int slot) const noexcept;
  void set_charged(LedgerEntry& entry, std::uint64_t charged) noexcept;
  void clear_entry(LedgerEntry& entry) noexcept;
  std::size_t reclaim_dead_locked();
  bool reclaim_due() noexcept;  // with the lock held: whether kReclaimInterval passed since the last look
  LedgerEntry& entry(int slot) const noexcept { return file_.layout().entries[slot]; }

  LedgerFile file_;
};

/// charge(), and while the verdict is needs_trim, charge() again every millisecond or so for up to `wait`: the
/// borrowers asked to give memory back trim at their next allocation or within their responder's period.
ChargeResult charge_waiting_for_trims(Ledger& ledger, int slot, std::uint64_t bytes, std::chrono::milliseconds wait);

}  // namespace plimsoll::sharing
