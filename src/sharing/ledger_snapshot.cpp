#include "sharing/ledger_snapshot.hpp"

#include <cstring>
#include <thread>

#include <nlohmann/json.hpp>

#include "sharing/entry_liveness.hpp"

namespace plimsoll::sharing {

namespace {

constexpr auto relaxed = std::memory_order_relaxed;

std::vector<ProcessRow> copy_rows(const LedgerFileLayout& layout, std::vector<std::uint64_t>& start_times) {
  std::vector<ProcessRow> rows;
  start_times.clear();
  for (const LedgerEntry& e : layout.entries) {
    const int pid = e.pid.load(relaxed);
    if (pid == 0) continue;
    ProcessRow row;
    row.pid = pid;
    const std::uint32_t flags = e.flags.load(relaxed);
    row.can_trim = (flags & kEntryCanTrim) != 0;
    row.interposed = (flags & kEntryInterposed) != 0;
    row.share = e.share.load(relaxed);
    row.cap = e.cap.load(relaxed);
    row.charged = e.charged.load(relaxed);
    row.in_use = e.in_use.load(relaxed);
    row.peak = e.peak.load(relaxed);
    row.context = e.context.load(relaxed);
    row.refusals = e.refusals.load(relaxed);
    row.trim_wanted = e.trim_wanted.load(relaxed);
    row.trim_requests = e.trim_requests.load(relaxed);
    row.trims = e.trims.load(relaxed);
    row.slot = static_cast<int>(&e - layout.entries);
    row.paused = (flags & kEntryPaused) != 0;
    row.paused_bytes = e.paused_bytes.load(relaxed);
    row.pid_namespace = e.pid_namespace.load(relaxed);
    row.start_time = e.start_time.load(relaxed);
    char name[kCommandChars + 1] = {};
    for (std::size_t word = 0; word < kCommandChars / 8; ++word) {
      const std::uint64_t bits = e.command[word].load(relaxed);
      std::memcpy(name + word * 8, &bits, 8);
    }
    row.command = name;
    start_times.push_back(e.start_time.load(relaxed));
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace

std::vector<Loan> attribute_loans(const std::vector<ProcessRow>& processes, std::uint64_t limit) {
  std::uint64_t shares = 0, borrowed = 0, unused = 0;
  for (const ProcessRow& p : processes) {
    shares += p.share;
    borrowed += p.borrowed();
    unused += p.share > p.charged ? p.share - p.charged : 0;
  }
  std::vector<Loan> loans;
  if (borrowed == 0) return loans;
  const std::uint64_t unshared = limit > shares ? limit - shares : 0;
  const std::uint64_t from_unshared = std::min(borrowed, unshared);
  const std::uint64_t from_shares = borrowed - from_unshared;
  for (const ProcessRow& b : processes) {
    if (b.borrowed() == 0) continue;
    const long double part = static_cast<long double>(b.borrowed()) / static_cast<long double>(borrowed);
    if (from_unshared > 0)
      loans.push_back({.borrower = b.pid, .lender = 0,
                       .bytes = static_cast<std::uint64_t>(part * static_cast<long double>(from_unshared))});
    if (from_shares == 0 || unused == 0) continue;
    for (const ProcessRow& l : processes) {
      if (l.share <= l.charged) continue;
      const long double lent = static_cast<long double>(l.share - l.charged) / static_cast<long double>(unused);
      loans.push_back({.borrower = b.pid, .lender = l.pid,
                       .bytes = static_cast<std::uint64_t>(part * lent * static_cast<long double>(from_shares))});
    }
  }
  return loans;
}

LedgerSnapshot read_snapshot(const LedgerFile& file) {
  const LedgerFileLayout& layout = file.layout();
  const LedgerHeader& header = layout.header;
  LedgerSnapshot snapshot;
  snapshot.path = file.path();
  snapshot.uuid = std::string(header.uuid, strnlen(header.uuid, kUuidChars));
  snapshot.device_bytes = header.device_bytes;
  snapshot.limit_bytes = header.limit_bytes;
  std::vector<std::uint64_t> start_times;
  snapshot.consistent = false;
  for (int attempt = 0; attempt < 200 && !snapshot.consistent; ++attempt) {
    const std::uint64_t before = header.sequence.load(std::memory_order_acquire);
    if (before % 2 == 1) {
      std::this_thread::yield();
      continue;
    }
    snapshot.processes = copy_rows(layout, start_times);
    snapshot.charged = header.total_charged.load(relaxed);
    snapshot.shares = header.total_shares.load(relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    snapshot.consistent = header.sequence.load(relaxed) == before;
  }
  if (!snapshot.consistent) {  // a writer died inside: show the entries as they are
    snapshot.processes = copy_rows(layout, start_times);
    snapshot.charged = header.total_charged.load(relaxed);
    snapshot.shares = header.total_shares.load(relaxed);
  }
  snapshot.repairs = header.repairs.load(relaxed);
  snapshot.reclaimed = header.reclaimed.load(relaxed);
  const std::uint64_t namespace_here = this_pid_namespace();
  for (ProcessRow& row : snapshot.processes) row.running = entry_alive(file, row.slot, namespace_here);
  snapshot.loans = attribute_loans(snapshot.processes, snapshot.limit_bytes);
  return snapshot;
}

nlohmann::json to_json(const LedgerSnapshot& s) {
  nlohmann::json processes = nlohmann::json::array();
  for (const ProcessRow& p : s.processes) {
    processes.push_back({{"pid", p.pid}, {"command", p.command}, {"running", p.running},
                         {"governed_by", p.interposed ? "driver" : "engine"}, {"can_trim", p.can_trim},
                         {"share_bytes", p.share}, {"cap_bytes", p.cap}, {"in_use_bytes", p.in_use},
                         {"reserved_bytes", p.charged}, {"peak_bytes", p.peak}, {"context_bytes", p.context},
                         {"borrowed_bytes", p.borrowed()}, {"refusals", p.refusals},
                         {"trim_requested_bytes", p.trim_wanted}, {"trim_requests", p.trim_requests},
                         {"trims", p.trims}, {"paused", p.paused}, {"paused_bytes", p.paused_bytes}});
  }
  nlohmann::json loans = nlohmann::json::array();
  for (const Loan& loan : s.loans)
    loans.push_back({{"borrower", loan.borrower},
                     {"lender", loan.lender == 0 ? nlohmann::json("unshared") : nlohmann::json(loan.lender)},
                     {"bytes", loan.bytes}});
  return {{"uuid", s.uuid}, {"ledger", s.path}, {"total_bytes", s.device_bytes}, {"limit_bytes", s.limit_bytes},
          {"reserved_bytes", s.charged}, {"shares_bytes", s.shares}, {"consistent", s.consistent},
          {"repairs", s.repairs}, {"reclaimed", s.reclaimed}, {"processes", processes}, {"loans", loans}};
}

}  // namespace plimsoll::sharing
