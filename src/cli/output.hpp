#pragma once
// Plain-text tables for the CLI's human output.
#include <cstddef>
#include <string>
#include <vector>

namespace plimsoll::cli {

/// A table with a header row, columns padded to their widest cell. Numbers read best right-aligned, so each
/// column says how it aligns.
class Table {
 public:
  enum class Align { left, right };
  struct Column {
    std::string header;
    Align align = Align::left;
  };

  explicit Table(std::vector<Column> columns);
  /// Throws std::invalid_argument when the row does not have one cell per column (a programming error).
  void add_row(std::vector<std::string> cells);
  bool empty() const noexcept { return rows_.empty(); }
  /// The header, a rule under it, then the rows; every line ends with '\n' and has no trailing blanks.
  std::string render() const;

 private:
  std::vector<Column> columns_;
  std::vector<std::vector<std::string>> rows_;
};

/// The memory table of `train` and `run`: device, tag, in use, peak in use, reserved, peak reserved, limit.
Table memory_table();

}  // namespace plimsoll::cli
