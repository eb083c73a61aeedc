#include "sharing/ledger_scan.hpp"

#include <algorithm>
#include <filesystem>

namespace plimsoll::sharing {

std::vector<LedgerReading> read_ledgers(const std::string& dir) {
  std::vector<std::string> paths;
  std::error_code error;
  for (std::filesystem::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    // A ledger being created is built under NAME.PID.tmp and linked into place whole: skip those.
    if (name.rfind(kLedgerPrefix, 0) == 0 && !name.ends_with(".tmp")) paths.push_back(it->path().string());
  }
  std::sort(paths.begin(), paths.end());
  std::vector<LedgerReading> readings;
  for (const std::string& path : paths) {
    LedgerReading reading{.path = path, .snapshot = std::nullopt, .error = {}};
    try {
      reading.snapshot = read_snapshot(LedgerFile::open_read_only(path));
    } catch (const std::exception& failure) {
      reading.error = failure.what();
    }
    readings.push_back(std::move(reading));
  }
  return readings;
}

}  // namespace plimsoll::sharing
