// Reads the allocation-trace text format of ../shared/traces (see its README.md).
//
// Built for 10M-event files: the file is read in one go and walked with string_views and std::from_chars, with
// no allocation per line, so loading costs about as much as touching the bytes. Ids are resolved to dense slots
// here, once, so replaying a trace indexes vectors instead of hashing.
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <fmt/format.h>

#include "plimsoll/error.hpp"
#include "plimsoll/trace.hpp"

namespace plimsoll {
namespace {

constexpr std::uint32_t kMaxSlots = std::numeric_limits<std::uint32_t>::max() - 1;
constexpr std::size_t kQuotedTokenLimit = 40;  // longer tokens are cut in messages: fuzzed lines can be huge

// Open addressing for ids outside the dense range: a probe touches one flat cell (id and slot side by side, one
// cache miss) instead of a heap node per id, which keeps a 10M-event trace with scattered ids (addresses, hashes) loading in about a second. Ids are never
// removed (a freed id stays known, to report reuse), and id 0 is invalid in a trace, so it marks empty cells.
class SparseIdMap {
 public:
  static constexpr std::uint32_t kAbsent = std::numeric_limits<std::uint32_t>::max();

  std::uint32_t find(std::uint64_t id) const {
    if (cells_.empty()) return kAbsent;
    for (std::size_t index = home(id);; index = (index + 1) & mask()) {
      const Cell& cell = cells_[index];
      if (cell.id == id) return cell.slot;
      if (cell.id == 0) return kAbsent;
    }
  }

  // `id` must not be present.
  void insert(std::uint64_t id, std::uint32_t slot) {
    // Grow at 5/8 full: linear probing stays short up to there.
    if (8 * (size_ + 1) > 5 * cells_.size()) grow();
    place(id, slot);
    ++size_;
  }

 private:
  struct Cell {
    std::uint64_t id = 0;
    std::uint32_t slot = 0;
  };

  std::size_t mask() const { return cells_.size() - 1; }

  std::size_t home(std::uint64_t id) const {
    // splitmix64's finalizer: ids in arithmetic progressions (strided addresses) spread over all cells.
    id ^= id >> 30;
    id *= 0xbf58476d1ce4e5b9ULL;
    id ^= id >> 27;
    id *= 0x94d049bb133111ebULL;
    id ^= id >> 31;
    return static_cast<std::size_t>(id) & mask();
  }

  void place(std::uint64_t id, std::uint32_t slot) {
    std::size_t index = home(id);
    while (cells_[index].id != 0) index = (index + 1) & mask();
    cells_[index] = Cell{id, slot};
  }

  void grow() {
    std::vector<Cell> old_cells(std::max<std::size_t>(64, 2 * cells_.size()));
    old_cells.swap(cells_);
    for (const Cell& cell : old_cells) {
      if (cell.id != 0) place(cell.id, cell.slot);
    }
  }

  std::vector<Cell> cells_;
  std::size_t size_ = 0;
};

// Trace ids -> dense slots. Real traces number allocations 1, 2, 3, ..., so ids up to the file's line count
// index a plain vector (memory bounded by the file's size). Any other id goes through the sparse map, so odd
// files stay correct and fast without being able to size the vector.
class IdIndex {
 public:
  static constexpr std::uint32_t kAbsent = SparseIdMap::kAbsent;

  explicit IdIndex(std::uint64_t dense_limit) : dense_limit_(dense_limit) {}

  std::uint32_t find(std::uint64_t id) const {
    if (id < dense_limit_) return id < dense_.size() ? dense_[static_cast<std::size_t>(id)] : kAbsent;
    return sparse_.find(id);
  }

  void insert(std::uint64_t id, std::uint32_t slot) {
    if (id >= dense_limit_) {
      sparse_.insert(id, slot);
      return;
    }
    if (id >= dense_.size()) {
      // Doubling keeps the growth amortized when ids arrive in increasing order.
      const std::uint64_t wanted = std::max<std::uint64_t>(id + 1, 2 * dense_.size());
      dense_.resize(static_cast<std::size_t>(std::min(wanted, dense_limit_)), kAbsent);
    }
    dense_[static_cast<std::size_t>(id)] = slot;
  }

 private:
  std::uint64_t dense_limit_;
  std::vector<std::uint32_t> dense_;
  SparseIdMap sparse_;
};

// What the parser remembers of every allocation, live or freed, so errors can point at the earlier line.
struct SlotState {
  std::uint64_t bytes = 0;
  std::uint32_t allocated_line = 0;
  std::uint32_t freed_line = 0;  // 0 while live
};

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

std::string_view trim(std::string_view text) {
  while (!text.empty() && is_blank(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_blank(text.back())) text.remove_suffix(1);
  return text;
}

// Whitespace-separated fields of one line.
class Fields {
 public:
  explicit Fields(std::string_view line) : rest_(line) {}

  // The next field, or an empty view when the line has no more.
  std::string_view next() {
    while (!rest_.empty() && is_blank(rest_.front())) rest_.remove_prefix(1);
    std::size_t length = 0;
    while (length < rest_.size() && !is_blank(rest_[length])) ++length;
    std::string_view field = rest_.substr(0, length);
    rest_.remove_prefix(length);
    return field;
  }

 private:
  std::string_view rest_;
};

std::string quoted(std::string_view token) {
  if (token.size() <= kQuotedTokenLimit) return fmt::format("'{}'", token);
  return fmt::format("'{}...'", token.substr(0, kQuotedTokenLimit));
}

class Parser {
 public:
  Parser(std::string_view text, std::string_view origin)
      : text_(text), line_count_(count_lines(text)), ids_(line_count_ + 1) {
    trace_.origin = std::string(origin);
    trace_.events.reserve(static_cast<std::size_t>(line_count_ + 1));
  }

  Trace run() {
    std::size_t position = 0;
    while (position < text_.size()) {
      const std::size_t newline = text_.find('\n', position);
      const std::size_t end = newline == std::string_view::npos ? text_.size() : newline;
      if (line_ == std::numeric_limits<std::uint32_t>::max()) {
        fail("the file has more than 4294967295 lines; split the trace into several files");
      }
      ++line_;
      parse_line(text_.substr(position, end - position));
      position = end + 1;
    }
    if (open_step_) {
      line_ = open_step_->line;
      fail(fmt::format("step {} begins here but never ends; add '# step {} end' after its events",
                       open_step_->number, open_step_->number));
    }
    trace_.slots = static_cast<std::uint32_t>(slots_.size());
    return std::move(trace_);
  }

 private:
  struct OpenStep {
    int number = 0;
    std::size_t begin_marker = 0;  // event index of "# step N begin"
    std::uint32_t line = 0;
  };

  static std::uint64_t count_lines(std::string_view text) {
    return static_cast<std::uint64_t>(std::count(text.begin(), text.end(), '\n'));
  }

  [[noreturn]] void fail(std::string_view what) const {
    throw InvalidArgument(fmt::format("{}:{}: {}", trace_.origin, line_, what));
  }

  void parse_line(std::string_view raw) {
    const std::string_view line = trim(raw);
    if (line.empty()) return;
    if (line.front() == '#') {
      parse_marker(trim(line.substr(1)));
      return;
    }
    Fields fields(line);
    const std::string_view kind = fields.next();
    if (kind == "a") {
      parse_allocation(fields);
    } else if (kind == "f") {
      parse_free(fields);
    } else {
      fail(fmt::format("unknown event {}; each line is 'a <id> <bytes>', 'f <id>', '# <marker text>' or blank",
                       quoted(kind)));
    }
  }

  std::uint64_t parse_id(std::string_view token, std::string_view form) const {
    if (token.empty()) fail(fmt::format("missing id; write the line as '{}'", form));
    if (token.front() == '-') {
      fail(fmt::format("id {} is negative; ids are positive integers (1, 2, 3, ...)", quoted(token)));
    }
    std::uint64_t id = 0;
    const auto [end, error] = std::from_chars(token.data(), token.data() + token.size(), id);
    if (error == std::errc::result_out_of_range) {
      fail(fmt::format("id {} is too large; ids must fit in 64 bits", quoted(token)));
    }
    if (error != std::errc() || end != token.data() + token.size()) {
      fail(fmt::format("id {} is not a number; ids are positive decimal integers (1, 2, 3, ...)", quoted(token)));
    }
    if (id == 0) fail("id 0 is not allowed; ids are positive integers, start them at 1");
    return id;
  }

  std::uint64_t parse_bytes(std::string_view token) const {
    if (token.empty()) fail("missing byte count; write allocations as 'a <id> <bytes>'");
    if (token.front() == '-') {
      fail(fmt::format("byte count {} is negative; write the size requested, in bytes (0 or more)", quoted(token)));
    }
    std::uint64_t bytes = 0;
    const auto [end, error] = std::from_chars(token.data(), token.data() + token.size(), bytes);
    if (error == std::errc::result_out_of_range) {
      fail(fmt::format("byte count {} is too large; it must fit in 64 bits", quoted(token)));
    }
    if (error != std::errc() || end != token.data() + token.size()) {
      fail(fmt::format("byte count {} is not a number; write the size in bytes as a decimal integer (no units)",
                       quoted(token)));
    }
    return bytes;
  }

  void reject_extra(Fields& fields, std::string_view form) const {
    const std::string_view extra = fields.next();
    if (!extra.empty()) fail(fmt::format("extra field {}; write the line as '{}'", quoted(extra), form));
  }

  void parse_allocation(Fields& fields) {
    constexpr std::string_view form = "a <id> <bytes>";
    const std::uint64_t id = parse_id(fields.next(), form);
    const std::uint64_t bytes = parse_bytes(fields.next());
    reject_extra(fields, form);

    if (const std::uint32_t earlier = ids_.find(id); earlier != IdIndex::kAbsent) {
      fail(fmt::format("id {} was already allocated at line {}; give every allocation its own id", id,
                       slots_[earlier].allocated_line));
    }
    if (slots_.size() >= kMaxSlots) fail("more than 4294967294 allocations; split the trace into several files");
    if (bytes > std::numeric_limits<std::uint64_t>::max() - live_bytes_) {
      fail(fmt::format("the live bytes pass 2^64 with this allocation of {} bytes; the byte count is wrong", bytes));
    }

    const auto slot = static_cast<std::uint32_t>(slots_.size());
    ids_.insert(id, slot);
    slots_.push_back(SlotState{bytes, line_, 0});
    live_bytes_ += bytes;
    trace_.peak_live_bytes = std::max(trace_.peak_live_bytes, live_bytes_);
    ++trace_.allocations;
    trace_.events.push_back(TraceEvent{TraceEvent::Kind::allocate, slot, bytes, line_});
  }

  void parse_free(Fields& fields) {
    constexpr std::string_view form = "f <id>";
    const std::uint64_t id = parse_id(fields.next(), form);
    reject_extra(fields, form);

    const std::uint32_t slot = ids_.find(id);
    if (slot == IdIndex::kAbsent) {
      fail(fmt::format("free of id {}, which was never allocated; every 'f {}' must follow its 'a {} <bytes>'", id,
                       id, id));
    }
    SlotState& state = slots_[slot];
    if (state.freed_line != 0) {
      fail(fmt::format("id {} was already freed at line {}; free each allocation once", id, state.freed_line));
    }
    state.freed_line = line_;
    live_bytes_ -= state.bytes;
    ++trace_.frees;
    trace_.events.push_back(TraceEvent{TraceEvent::Kind::free, slot, 0, line_});
  }

  void parse_marker(std::string_view text) {
    if (trace_.markers.size() >= std::numeric_limits<std::uint32_t>::max()) {
      fail("more than 4294967295 markers; split the trace into several files");
    }
    const std::size_t index = trace_.events.size();
    trace_.events.push_back(
        TraceEvent{TraceEvent::Kind::marker, static_cast<std::uint32_t>(trace_.markers.size()), 0, line_});
    trace_.markers.emplace_back(text);

    Fields fields(text);
    if (fields.next() != "step") return;
    const std::string_view number_text = fields.next();
    const std::string_view boundary = fields.next();
    // Only the exact shape "step N begin|end" is a step marker; any other text starting with "step" is a note.
    if ((boundary != "begin" && boundary != "end") || !fields.next().empty()) return;

    int number = 0;
    const auto [end, error] = std::from_chars(number_text.data(), number_text.data() + number_text.size(), number);
    if (error != std::errc() || end != number_text.data() + number_text.size()) {
      fail(fmt::format("step number {} is not an integer; write '# step N {}' with N a whole number",
                       quoted(number_text), boundary));
    }
    if (boundary == "begin") {
      begin_step(number, index);
    } else {
      end_step(number, index);
    }
  }

  void begin_step(int number, std::size_t marker_index) {
    if (open_step_) {
      fail(fmt::format("step {} begins while step {} (begun at line {}) is still open; add '# step {} end' before "
                       "this line",
                       number, open_step_->number, open_step_->line, open_step_->number));
    }
    open_step_ = OpenStep{number, marker_index, line_};
  }

  void end_step(int number, std::size_t marker_index) {
    if (!open_step_) {
      fail(fmt::format("'# step {} end' without a matching '# step {} begin'; add the begin marker before the "
                       "step's events or remove this line",
                       number, number));
    }
    if (open_step_->number != number) {
      fail(fmt::format("'# step {} end' closes step {} (begun at line {}); write '# step {} end' or fix the "
                       "begin marker",
                       number, open_step_->number, open_step_->line, open_step_->number));
    }
    trace_.steps.push_back(TraceStep{number, open_step_->begin_marker + 1, marker_index});
    open_step_.reset();
  }

  std::string_view text_;
  std::uint64_t line_count_;
  IdIndex ids_;
  Trace trace_;
  std::vector<SlotState> slots_;
  std::uint64_t live_bytes_ = 0;
  std::uint32_t line_ = 0;
  std::optional<OpenStep> open_step_;
};

std::string read_whole_file(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    const std::string reason = std::error_code(errno, std::generic_category()).message();
    throw InvalidArgument(fmt::format("{}: cannot open the trace: {}; check the path", path, reason));
  }
  constexpr std::size_t kChunk = std::size_t{1} << 20;
  std::string text;
  std::error_code size_error;
  const std::uintmax_t size_hint = std::filesystem::file_size(path, size_error);
  // One chunk of slack: the read loop asks for a whole chunk past the end before it sees end-of-file.
  if (!size_error) text.reserve(static_cast<std::size_t>(size_hint) + kChunk);

  // Chunked reads also serve pipes and /dev/stdin, whose size is unknown up front.
  std::size_t used = 0;
  while (true) {
    text.resize(used + kChunk);
    const std::size_t got = std::fread(text.data() + used, 1, kChunk, file);
    used += got;
    if (got < kChunk) break;
  }
  text.resize(used);
  const bool failed = std::ferror(file) != 0;
  const int read_errno = errno;
  std::fclose(file);
  if (failed) {
    const std::string reason = std::error_code(read_errno, std::generic_category()).message();
    throw InvalidArgument(fmt::format("{}: cannot read the trace: {}; pass a readable trace file", path, reason));
  }
  return text;
}

}  // namespace

Trace parse_trace(std::string_view text, std::string_view origin) { return Parser(text, origin).run(); }

Trace read_trace(const std::string& path) { return parse_trace(read_whole_file(path), path); }

}  // namespace plimsoll
