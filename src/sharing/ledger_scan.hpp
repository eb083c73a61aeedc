#pragma once
// Every GPU ledger in a directory, read for `plimsoll top`: a snapshot of each, or why one could not be read.
#include <optional>
#include <string>
#include <vector>

#include "sharing/ledger_snapshot.hpp"

namespace plimsoll::sharing {

struct LedgerReading {
  std::string path;
  std::optional<LedgerSnapshot> snapshot;
  std::string error;  // when there is no snapshot
};

/// The ledgers (files named plimsoll-ledger-*) in `dir`, in name order; none for a missing directory.
std::vector<LedgerReading> read_ledgers(const std::string& dir);

}  // namespace plimsoll::sharing
