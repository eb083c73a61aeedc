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
#include "telemetry/traces/id_map.hpp"
#include "telemetry/traces/step_markers.hpp"
#include "telemetry/traces/trace_totals.hpp"

namespace plimsoll {
namespace {

using telemetry::SparseIdMap;

constexpr std::uint32_t kMaxSlots = std::numeric_limits<std::uint32_t>::max() - 1;
constexpr std::size_t kQuotedTokenLimit = 40;  // longer tokens are cut in messages: fuzzed lines can be huge

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
    if (const auto unfinished = steps_.unfinished()) {
      line_ = unfinished->line;
      fail(unfinished->message);
    }
    trace_.steps = std::move(steps_.steps());
    if (!trace_.steps.empty()) trace_.step_source = StepSource::markers;
    trace_.slots = static_cast<std::uint32_t>(slots_.size());
    return std::move(trace_);
  }

 private:
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
    if (!totals_.fits(bytes)) {
      fail(fmt::format("the live bytes pass 2^64 with this allocation of {} bytes; the byte count is wrong", bytes));
    }

    const auto slot = static_cast<std::uint32_t>(slots_.size());
    ids_.insert(id, slot);
    slots_.push_back(SlotState{bytes, line_, 0});
    totals_.allocated(trace_, bytes);
    trace_.events.push_back(TraceEvent{.kind = TraceEvent::Kind::allocate, .slot = slot, .bytes = bytes, .line = line_});
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
    totals_.freed(trace_, state.bytes);
    trace_.events.push_back(TraceEvent{.kind = TraceEvent::Kind::free, .slot = slot, .line = line_});
  }

  void parse_marker(std::string_view text) {
    if (trace_.markers.size() >= std::numeric_limits<std::uint32_t>::max()) {
      fail("more than 4294967295 markers; split the trace into several files");
    }
    const std::size_t index = trace_.events.size();
    trace_.events.push_back(
        TraceEvent{.kind = TraceEvent::Kind::marker, .slot = static_cast<std::uint32_t>(trace_.markers.size()),
                   .line = line_});
    trace_.markers.emplace_back(text);

    if (auto error = steps_.on_marker(text, index, line_)) fail(*error);
  }

  std::string_view text_;
  std::uint64_t line_count_;
  IdIndex ids_;
  Trace trace_;
  std::vector<SlotState> slots_;
  telemetry::TraceTotals totals_;
  std::uint32_t line_ = 0;
  telemetry::StepMarkers steps_;
};

}  // namespace

Trace parse_trace(std::string_view text, std::string_view origin) { return Parser(text, origin).run(); }

}  // namespace plimsoll
