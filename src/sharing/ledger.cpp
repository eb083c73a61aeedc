#include "sharing/ledger.hpp"

#include <pthread.h>
#include <time.h>

#include <algorithm>
#include <thread>
#include <cerrno>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "plimsoll/error.hpp"
#include "plimsoll/size.hpp"
#include "sharing/entry_liveness.hpp"

namespace plimsoll::sharing {

namespace {

constexpr auto relaxed = std::memory_order_relaxed;

Holder holder_of(const LedgerEntry& entry) noexcept {
  return Holder{.share = entry.share.load(relaxed), .cap = entry.cap.load(relaxed),
                .charged = entry.charged.load(relaxed), .can_trim = (entry.flags.load(relaxed) & kEntryCanTrim) != 0};
}

// Holds the robust mutex, repairing after a holder that died, and marks the ledger as being written (seqlock).
class Lock {
 public:
  template <typename Repair>
  Lock(LedgerHeader& header, Repair&& repair) : header_(header) {
    const int result = pthread_mutex_lock(&header_.mutex);
    if (result == EOWNERDEAD) {
      // A process died holding the lock, perhaps between updating an entry and the totals: rebuild the totals
      // from the entries (each a single store, so each is whole) before anyone reads them.
      if (header_.sequence.load(relaxed) % 2 == 1) header_.sequence.fetch_add(1);
      repair();
      header_.repairs.fetch_add(1, relaxed);
      pthread_mutex_consistent(&header_.mutex);
    } else if (result != 0) {
      throw Error(fmt::format("the GPU ledger's lock cannot be taken ({}): the ledger is unusable; stop the jobs "
                              "sharing this GPU and remove the ledger file", std::strerror(result)));
    }
    header_.sequence.fetch_add(1);  // odd: being written
  }
  ~Lock() {
    header_.sequence.fetch_add(1);
    pthread_mutex_unlock(&header_.mutex);
  }
  Lock(const Lock&) = delete;
  Lock& operator=(const Lock&) = delete;

 private:
  LedgerHeader& header_;
};

}  // namespace

Ledger::Ledger(LedgerFile file) : file_(std::move(file)) {
  if (!file_.writable()) throw InvalidArgument("a Ledger needs its file opened for writing");
}

template <typename Body>
auto Ledger::locked(Body&& body) {
  const Lock lock(file_.layout().header, [this] { repair(); });
  return body();
}

void Ledger::repair() noexcept {
  LedgerHeader& header = file_.layout().header;
  std::uint64_t charged = 0, shares = 0, committed = 0, trimmable_borrowed = 0;
  for (const LedgerEntry& entry : file_.layout().entries) {
    if (entry.pid.load(relaxed) == 0) continue;
    const Holder h = holder_of(entry);
    charged += h.charged;
    shares += h.share;
    committed += committed_by(h);
    if (h.can_trim) trimmable_borrowed += borrowed_by(h);
  }
  header.total_charged.store(charged, relaxed);
  header.total_shares.store(shares, relaxed);
  header.total_committed.store(committed, relaxed);
  header.trimmable_borrowed.store(trimmable_borrowed, relaxed);
}

LedgerTotals Ledger::totals() const noexcept {
  const LedgerHeader& header = file_.layout().header;
  return LedgerTotals{.limit = header.limit_bytes, .charged = header.total_charged.load(relaxed),
                      .committed = header.total_committed.load(relaxed),
                      .trimmable_borrowed = header.trimmable_borrowed.load(relaxed)};
}

Holder Ledger::holder(int slot) const noexcept { return holder_of(entry(slot)); }

void Ledger::set_charged(LedgerEntry& e, std::uint64_t charged) noexcept {
  LedgerHeader& header = file_.layout().header;
  const Holder before = holder_of(e);
  Holder after = before;
  after.charged = charged;
  // Entry first, then totals: a holder dying in between leaves the entry right, and repair() redoes the totals.
  e.charged.store(charged, relaxed);
  if ((e.flags.load(relaxed) & kEntryCanTrim) == 0) e.in_use.store(charged, relaxed);
  if (charged > e.peak.load(relaxed)) e.peak.store(charged, relaxed);
  header.total_charged.store(header.total_charged.load(relaxed) - before.charged + after.charged, relaxed);
  header.total_committed.store(header.total_committed.load(relaxed) - committed_by(before) + committed_by(after),
                               relaxed);
  if (before.can_trim)
    header.trimmable_borrowed.store(
        header.trimmable_borrowed.load(relaxed) - borrowed_by(before) + borrowed_by(after), relaxed);
}

void Ledger::clear_entry(LedgerEntry& e) noexcept {
  e.pid.store(0, relaxed);  // first: a free slot is never half-read as a live one
  e.flags.store(0, relaxed);
  e.start_time.store(0, relaxed);
  for (auto* field : {&e.share, &e.cap, &e.charged, &e.in_use, &e.peak, &e.context, &e.refusals, &e.trim_wanted,
                      &e.trim_requests, &e.trims, &e.pid_namespace, &e.control_request, &e.control_answer,
                      &e.paused_bytes})
    field->store(0, relaxed);
  for (auto& word : e.command) word.store(0, relaxed);
  for (auto& word : e.control_message) word.store(0, relaxed);
}

std::size_t Ledger::reclaim_dead_locked() {
  std::size_t removed = 0;
  const std::uint64_t namespace_here = this_pid_namespace();
  for (int slot = 0; slot < static_cast<int>(kLedgerEntries); ++slot) {
    LedgerEntry& e = entry(slot);
    if (e.pid.load(relaxed) == 0 || entry_alive(file_, slot, namespace_here)) continue;
    clear_entry(e);
    ++removed;
  }
  if (removed > 0) {
    repair();
    file_.layout().header.reclaimed.fetch_add(removed, relaxed);
  }
  return removed;
}

bool Ledger::reclaim_due() noexcept {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  const auto now_ns = static_cast<std::uint64_t>(now.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(now.tv_nsec);
  std::atomic<std::uint64_t>& last = file_.layout().header.last_reclaim_ns;
  const auto interval_ns = static_cast<std::uint64_t>(std::chrono::nanoseconds(kReclaimInterval).count());
  if (now_ns - last.load(relaxed) < interval_ns) return false;
  last.store(now_ns, relaxed);
  return true;
}

std::size_t Ledger::reclaim_dead() {
  return locked([&] { return reclaim_dead_locked(); });
}

int Ledger::join(const Member& member) {
  const std::uint64_t limit = this->limit();
  if (member.cap > limit || member.share > member.cap)
    throw InvalidArgument(fmt::format("a share of {} with a cap of {} does not fit this GPU's limit of {}: the cap "
                                      "must be at least the share and at most the limit",
                                      format_size(member.share), format_size(member.cap), format_size(limit)));
  return locked([&] {
    reclaim_dead_locked();
    LedgerHeader& header = file_.layout().header;
    const std::uint64_t shares = header.total_shares.load(relaxed);
    int free_slot = -1;
    for (int slot = 0; slot < static_cast<int>(kLedgerEntries); ++slot) {
      const LedgerEntry& e = entry(slot);
      if (e.pid.load(relaxed) == member.who.pid && e.start_time.load(relaxed) == member.who.start_time)
        throw InvalidState(fmt::format(
            "process {} already has an entry in the GPU ledger {}: a process joins a GPU's ledger once, and another "
            "part of it (a second plimsoll Runtime or GpuShare, or a second copy of the library) joined first; "
            "create this GPU's devices through that one",
            member.who.pid, file_.path()));
      if (free_slot < 0 && e.pid.load(relaxed) == 0) free_slot = slot;
    }
    if (shares + member.share > limit) {
      std::string holders;
      for (const LedgerEntry& e : file_.layout().entries)
        if (e.pid.load(relaxed) != 0)
          holders += fmt::format("{}pid {} ({})", holders.empty() ? "" : ", ", e.pid.load(relaxed),
                                 format_size(e.share.load(relaxed)));
      throw Error(fmt::format("a guaranteed share of {} does not fit: the GPU's limit is {} and {} of it is already "
                              "promised (shares of {}); ask for at most {}, or wait for a job to end",
                              format_size(member.share), format_size(limit), format_size(shares), holders,
                              format_size(limit - shares)));
    }
    if (free_slot < 0)
      throw Error(fmt::format("the GPU ledger {} has no free entry ({} processes share the GPU, the most it holds)",
                              file_.path(), kLedgerEntries));
    LedgerEntry& e = entry(free_slot);
    clear_entry(e);  // a holder that died in the middle of a leave may have left counters behind
    const bool locked_alive = file_.hold_liveness_lock(free_slot);
    e.flags.store((member.can_trim ? kEntryCanTrim : 0) | (member.interposed ? kEntryInterposed : 0) |
                      (locked_alive ? kEntryLivenessLock : 0),
                  relaxed);
    e.pid_namespace.store(this_pid_namespace(), relaxed);
    e.start_time.store(member.who.start_time, relaxed);
    e.share.store(member.share, relaxed);
    e.cap.store(member.cap, relaxed);
    char name[kCommandChars] = {};
    std::memcpy(name, member.command.data(), std::min(member.command.size(), kCommandChars - 1));
    for (std::size_t word = 0; word < kCommandChars / 8; ++word) {
      std::uint64_t bits = 0;
      std::memcpy(&bits, name + word * 8, 8);
      e.command[word].store(bits, relaxed);
    }
    e.pid.store(member.who.pid, relaxed);  // last: the entry is whole before it counts
    repair();
    return free_slot;
  });
}

void Ledger::leave(int slot) noexcept {
  try {
    locked([&] {
      clear_entry(entry(slot));
      repair();
      return 0;
    });
    file_.drop_liveness_lock(slot);
  } catch (...) {
    // An unusable lock at exit: the entry is reclaimed as dead by the next process.
  }
}

ChargeResult Ledger::charge(int slot, std::uint64_t bytes, bool count) {
  return locked([&] {
    LedgerEntry& e = entry(slot);
    Verdict verdict = decide(totals(), holder(slot), bytes);
    if (verdict != Verdict::admitted && verdict != Verdict::over_cap && reclaim_due() && reclaim_dead_locked() > 0)
      verdict = decide(totals(), holder(slot), bytes);
    ChargeResult result{.verdict = verdict, .headroom = 0, .trims_asked = 0};
    if (verdict == Verdict::admitted) {
      set_charged(e, e.charged.load(relaxed) + bytes);
      return result;
    }
    if (count) e.refusals.fetch_add(1, relaxed);
    result.headroom = sharing::headroom(totals(), holder(slot));
    if (verdict == Verdict::needs_trim) {
      for (LedgerEntry& other : file_.layout().entries) {
        if (&other == &e || other.pid.load(relaxed) == 0 || (other.flags.load(relaxed) & kEntryCanTrim) == 0) continue;
        const std::uint64_t borrowed = borrowed_by(holder_of(other));
        if (borrowed == 0) continue;
        // A new request is counted once, however often the asker retries while it is pending.
        if (other.trim_wanted.exchange(borrowed, relaxed) == 0) other.trim_requests.fetch_add(1, relaxed);
        ++result.trims_asked;
      }
    }
    return result;
  });
}

void Ledger::release(int slot, std::uint64_t bytes) noexcept {
  try {
    locked([&] {
      LedgerEntry& e = entry(slot);
      const std::uint64_t charged = e.charged.load(relaxed);
      set_charged(e, charged - std::min(bytes, charged - std::min(charged, e.context.load(relaxed))));
      return 0;
    });
  } catch (...) {
  }
}

void Ledger::charge_unconditionally(int slot, std::uint64_t bytes, bool is_context) noexcept {
  try {
    locked([&] {
      LedgerEntry& e = entry(slot);
      const std::uint64_t room = limit() - std::min(limit(), e.charged.load(relaxed));
      const std::uint64_t counted = std::min(bytes, room);  // the entry never claims more than the GPU
      // Charged before the context grows: a reader checking the file meanwhile must never see context > charged.
      set_charged(e, e.charged.load(relaxed) + counted);
      if (is_context) e.context.fetch_add(counted, relaxed);
      return 0;
    });
  } catch (...) {
  }
}

void Ledger::set_in_use(int slot, std::uint64_t bytes) noexcept {
  entry(slot).in_use.store(bytes, relaxed);
}

std::uint64_t Ledger::headroom(int slot) {
  return locked([&] { return sharing::headroom(totals(), holder(slot)); });
}

std::uint64_t Ledger::charged(int slot) const noexcept { return entry(slot).charged.load(relaxed); }

std::uint64_t Ledger::others_charged(int slot) const noexcept {
  const std::uint64_t total = file_.layout().header.total_charged.load(relaxed);
  const std::uint64_t mine = charged(slot);
  return total > mine ? total - mine : 0;
}

bool Ledger::trim_requested(int slot) const noexcept { return entry(slot).trim_wanted.load(relaxed) != 0; }

void Ledger::trim_done(int slot) noexcept {
  LedgerEntry& e = entry(slot);
  if (e.trim_wanted.exchange(0, relaxed) != 0) e.trims.fetch_add(1, relaxed);
}

bool Ledger::take_context_token(const ProcessIdentity& who) {
  return locked([&] {
    LedgerHeader& header = file_.layout().header;
    const ProcessIdentity holder{.pid = header.context_token_pid.load(relaxed),
                                 .start_time = header.context_token_start_time.load(relaxed)};
    if (holder.pid != 0 && holder != who && is_running(holder)) return false;
    header.context_token_start_time.store(who.start_time, relaxed);
    header.context_token_pid.store(who.pid, relaxed);
    return true;
  });
}

void Ledger::release_context_token(const ProcessIdentity& who) noexcept {
  try {
    locked([&] {
      LedgerHeader& header = file_.layout().header;
      if (header.context_token_pid.load(relaxed) == who.pid &&
          header.context_token_start_time.load(relaxed) == who.start_time)
        header.context_token_pid.store(0, relaxed);
      return 0;
    });
  } catch (...) {
  }
}

ChargeResult charge_waiting_for_trims(Ledger& ledger, int slot, std::uint64_t bytes, std::chrono::milliseconds wait) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  ChargeResult result = ledger.charge(slot, bytes, false);
  while (result.verdict == Verdict::needs_trim && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    result = ledger.charge(slot, bytes, false);
  }
  return result.verdict == Verdict::admitted ? result : ledger.charge(slot, bytes, true);
}

}  // namespace plimsoll::sharing
