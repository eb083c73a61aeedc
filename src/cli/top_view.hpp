#pragma once
// `plimsoll top`'s screen: one block per GPU ledger (its limit, what is held and promised, one row per process,
// who borrows from whom), as text or as the --json document.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sharing/ledger_scan.hpp"

namespace plimsoll::cli {

std::string top_text(const std::vector<sharing::LedgerReading>& readings, const std::string& dir);
/// {"ledger_dir": ..., "gpus": [...], "errors": [{"ledger": ..., "error": ...}]}.
nlohmann::json top_json(const std::vector<sharing::LedgerReading>& readings, const std::string& dir);

}  // namespace plimsoll::cli
