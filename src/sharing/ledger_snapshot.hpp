#pragma once
// A copy of a GPU's ledger for people (`plimsoll top`): read without the lock, from a read-only mapping, retried
// until no writer was inside (seqlock), with who is alive and who borrows from whom worked out.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "sharing/ledger_file.hpp"

namespace plimsoll::sharing {

struct ProcessRow {
  int pid = 0;
  std::string command;
  bool running = true;  // false: dead, its entry is removed by the next writer
  bool can_trim = false;
  bool interposed = false;
  std::uint64_t share = 0, cap = 0, charged = 0, in_use = 0, peak = 0, context = 0;
  std::uint64_t refusals = 0, trim_wanted = 0, trim_requests = 0, trims = 0;
  int slot = 0;               // its entry in the file
  bool paused = false;        // `plimsoll pause`d
  std::uint64_t paused_bytes = 0;
  std::uint64_t pid_namespace = 0;  // its pid means something only in this namespace (0: unknown)
  std::uint64_t start_time = 0;     // with the pid, tells a reused slot's newcomer apart
  std::uint64_t borrowed() const { return charged > share ? charged - share : 0; }
};

/// `borrower` holds `bytes` beyond its share that came from `lender`'s unused share (lender 0: memory no share
/// covers).
struct Loan {
  int borrower = 0;
  int lender = 0;
  std::uint64_t bytes = 0;
};

struct LedgerSnapshot {
  std::string path;
  std::string uuid;
  std::uint64_t device_bytes = 0;
  std::uint64_t limit_bytes = 0;
  std::uint64_t charged = 0;
  std::uint64_t shares = 0;
  std::uint64_t repairs = 0;
  std::uint64_t reclaimed = 0;
  bool consistent = true;  // false: a writer stayed inside (it died); the next writer repairs the totals
  std::vector<ProcessRow> processes;
  std::vector<Loan> loans;
};

/// Reads the file (validated when it was opened).
LedgerSnapshot read_snapshot(const LedgerFile& file);

/// Who borrows from whom: borrowing is covered first by memory no share covers, then by the lenders' unused shares,
/// each lender in proportion to its unused share and each borrower in proportion to what it borrowed.
std::vector<Loan> attribute_loans(const std::vector<ProcessRow>& processes, std::uint64_t limit);

nlohmann::json to_json(const LedgerSnapshot& snapshot);

}  // namespace plimsoll::sharing
