#include "cli/top_view.hpp"

#include <fmt/format.h>

#include "cli/output.hpp"
#include "plimsoll/size.hpp"

namespace plimsoll::cli {

namespace {

std::string gpu_block(const sharing::LedgerSnapshot& s) {
  std::string text = fmt::format("GPU {}: limit {}, {} held, {} promised as shares{}\n", s.uuid,
                                 format_size(s.limit_bytes), format_size(s.charged), format_size(s.shares),
                                 s.consistent ? "" : " (a writer died mid-update; the next one repairs it)");
  Table table({{"pid", Table::Align::right}, {"command"}, {"governed"}, {"share", Table::Align::right},
               {"cap", Table::Align::right}, {"in use", Table::Align::right}, {"reserved", Table::Align::right},
               {"peak", Table::Align::right}, {"context", Table::Align::right}, {"borrowed", Table::Align::right},
               {"refusals", Table::Align::right}, {"trim asks", Table::Align::right}});
  for (const sharing::ProcessRow& p : s.processes)
    table.add_row({std::to_string(p.pid),
                   !p.running ? p.command + " (dead)" : p.paused ? p.command + " (paused)" : p.command,
                   p.interposed ? "driver" : "engine", format_size(p.share), format_size(p.cap),
                   format_size(p.in_use), format_size(p.charged), format_size(p.peak), format_size(p.context),
                   format_size(p.borrowed()), std::to_string(p.refusals),
                   fmt::format("{}/{}{}", p.trims, p.trim_requests, p.trim_wanted > 0 ? " pending" : "")});
  text += table.empty() ? "  no governed process\n" : table.render();
  for (const sharing::Loan& loan : s.loans) {
    text += loan.lender == 0
                ? fmt::format("  pid {} borrows {} no share covers\n", loan.borrower, format_size(loan.bytes))
                : fmt::format("  pid {} borrows {} of pid {}'s share\n", loan.borrower, format_size(loan.bytes),
                              loan.lender);
  }
  for (const sharing::ProcessRow& p : s.processes)
    if (p.borrowed() > 0 && !p.can_trim)
      text += fmt::format("  pid {} cannot give memory back when asked (governed at the driver)\n", p.pid);
  return text;
}

}  // namespace

std::string top_text(const std::vector<sharing::LedgerReading>& readings, const std::string& dir) {
  if (readings.empty()) return fmt::format("no GPU ledger in {}: no job runs under a GPU share\n", dir);
  std::string text;
  for (const sharing::LedgerReading& reading : readings) {
    if (!text.empty()) text += "\n";
    text += reading.snapshot ? gpu_block(*reading.snapshot) : fmt::format("error: {}\n", reading.error);
  }
  return text;
}

nlohmann::json top_json(const std::vector<sharing::LedgerReading>& readings, const std::string& dir) {
  nlohmann::json gpus = nlohmann::json::array();
  nlohmann::json errors = nlohmann::json::array();
  for (const sharing::LedgerReading& reading : readings) {
    if (reading.snapshot) gpus.push_back(sharing::to_json(*reading.snapshot));
    else errors.push_back({{"ledger", reading.path}, {"error", reading.error}});
  }
  return {{"ledger_dir", dir}, {"gpus", gpus}, {"errors", errors}};
}

}  // namespace plimsoll::cli
