#include "cli/output.hpp"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

namespace plimsoll::cli {

namespace {
constexpr std::string_view kGap = "  ";
}  // namespace

Table::Table(std::vector<Column> columns) : columns_(std::move(columns)) {}

void Table::add_row(std::vector<std::string> cells) {
  if (cells.size() != columns_.size()) {
    throw std::invalid_argument(
        fmt::format("table row has {} cells for {} columns", cells.size(), columns_.size()));
  }
  rows_.push_back(std::move(cells));
}

std::string Table::render() const {
  std::vector<std::size_t> widths;
  widths.reserve(columns_.size());
  for (const Column& column : columns_) widths.push_back(column.header.size());
  for (const auto& row : rows_) {
    for (std::size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }

  std::string out;
  const auto append_line = [&](const auto& cell_text) {
    std::string line;
    for (std::size_t i = 0; i < columns_.size(); ++i) {
      if (i != 0) line += kGap;
      const std::string& text = cell_text(i);
      const std::string padding(widths[i] - text.size(), ' ');
      line += columns_[i].align == Align::right ? padding + text : text + padding;
    }
    line.erase(line.find_last_not_of(' ') + 1);
    out += line;
    out += '\n';
  };

  append_line([&](std::size_t i) -> const std::string& { return columns_[i].header; });
  std::string rule;
  for (std::size_t i = 0; i < widths.size(); ++i) {
    if (i != 0) rule += kGap;
    rule += std::string(widths[i], '-');
  }
  out += rule + '\n';
  for (const auto& row : rows_) {
    append_line([&](std::size_t i) -> const std::string& { return row[i]; });
  }
  return out;
}

Table memory_table() {
  return Table({{"device", Table::Align::left},
                {"tag", Table::Align::left},
                {"in use", Table::Align::right},
                {"peak in use", Table::Align::right},
                {"reserved", Table::Align::right},
                {"peak reserved", Table::Align::right},
                {"limit", Table::Align::right}});
}

}  // namespace plimsoll::cli
