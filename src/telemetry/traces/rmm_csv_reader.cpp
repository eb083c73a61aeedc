// Reads the CSV log of RMM's logging_resource_adaptor (the RAPIDS Memory Manager's logging wrapper):
//
//   Thread,Time,Action,Pointer,Size,Stream
//   140573312345856,14:02:11.123456,allocate,0x7f8a40000000,1024,0x7f8a38001020
//   140573312345856,14:02:11.123502,free,0x7f8a40000000,1024,0x7f8a38001020
//   140573312345856,14:02:11.123777,allocate failure,0x0,1099511627776,0x0
//
// Thread is the OS thread id (decimal). Time is the wall-clock time of day, HH:MM:SS.ffffff, as spdlog's
// "%H:%M:%S.%f" writes it; seconds since the epoch (1634567890.123456) are read too. Pointer and Stream are
// hexadecimal: with "0x" from RMM versions that format with {fmt}, bare digits from later ones (printf's %llx).
// docs/trace-readers.md says how each column lands in the Trace model.
//
// Like the text reader, it is built for 10M-line files: one pass over the bytes with string_views and
// std::from_chars, no allocation per line; pointers become dense slots here, once (an address freed and
// allocated again is a new slot).
#include <algorithm>
#include <array>
#include <charconv>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "plimsoll/error.hpp"
#include "plimsoll/trace.hpp"
#include "telemetry/traces/id_map.hpp"
#include "telemetry/traces/trace_readers.hpp"
#include "telemetry/traces/trace_totals.hpp"

namespace plimsoll::telemetry {
namespace {

constexpr std::uint32_t kMaxSlots = std::numeric_limits<std::uint32_t>::max() - 1;
constexpr std::size_t kQuotedTokenLimit = 40;  // longer tokens are cut in messages
constexpr std::size_t kFieldCount = 6;
constexpr std::int64_t kNsPerSecond = 1'000'000'000;
constexpr std::int64_t kNsPerDay = 86'400 * kNsPerSecond;
// Epoch seconds below this fit in int64 nanoseconds (until the year 2255).
constexpr std::uint64_t kMaxEpochSeconds = 9'000'000'000;

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

std::string_view trim(std::string_view text) {
  while (!text.empty() && is_blank(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_blank(text.back())) text.remove_suffix(1);
  return text;
}

std::string quoted(std::string_view token) {
  if (token.size() <= kQuotedTokenLimit) return fmt::format("'{}'", token);
  return fmt::format("'{}...'", token.substr(0, kQuotedTokenLimit));
}

// True when all of `digits` is one unsigned number in `base`; `out_of_range` tells a too-large one apart.
bool parse_unsigned(std::string_view digits, std::uint64_t& value, bool& out_of_range, int base = 10) {
  out_of_range = false;
  if (digits.empty() || digits.front() == '-' || digits.front() == '+') return false;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value, base);
  if (error == std::errc::result_out_of_range) {
    out_of_range = true;
    return false;
  }
  return error == std::errc() && end == digits.data() + digits.size();
}

// A fraction of a second ("123456" of "…:07.123456") in nanoseconds; at most 9 digits.
std::optional<std::int64_t> fraction_ns(std::string_view digits) {
  if (digits.empty() || digits.size() > 9) return std::nullopt;
  std::int64_t value = 0;
  for (const char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + (c - '0');
  }
  for (std::size_t scale = digits.size(); scale < 9; ++scale) value *= 10;
  return value;
}

// "SS" or "SS.fff" as nanoseconds, seconds at most `max_seconds`.
std::optional<std::int64_t> seconds_ns(std::string_view text, std::uint64_t max_seconds) {
  const std::size_t dot = text.find('.');
  std::uint64_t seconds = 0;
  bool out_of_range = false;
  if (!parse_unsigned(text.substr(0, dot), seconds, out_of_range) || seconds > max_seconds) return std::nullopt;
  std::int64_t fraction = 0;
  if (dot != std::string_view::npos) {
    const std::optional<std::int64_t> parsed = fraction_ns(text.substr(dot + 1));
    if (!parsed) return std::nullopt;
    fraction = *parsed;
  }
  return static_cast<std::int64_t>(seconds) * kNsPerSecond + fraction;
}

// "HH:MM:SS.ffffff" as nanoseconds since midnight.
std::optional<std::int64_t> time_of_day_ns(std::string_view text) {
  const std::size_t first_colon = text.find(':');
  const std::size_t second_colon = text.find(':', first_colon + 1);
  if (first_colon == std::string_view::npos || second_colon == std::string_view::npos) return std::nullopt;
  std::uint64_t hours = 0;
  std::uint64_t minutes = 0;
  bool out_of_range = false;
  if (!parse_unsigned(text.substr(0, first_colon), hours, out_of_range) || hours > 23) return std::nullopt;
  if (!parse_unsigned(text.substr(first_colon + 1, second_colon - first_colon - 1), minutes, out_of_range) ||
      minutes > 59) {
    return std::nullopt;
  }
  const std::optional<std::int64_t> seconds = seconds_ns(text.substr(second_colon + 1), 60);  // 60: leap second
  if (!seconds) return std::nullopt;
  return static_cast<std::int64_t>(hours * 3600 + minutes * 60) * kNsPerSecond + *seconds;
}

// What the parser remembers of every allocation, live or freed, so errors can point at the earlier line.
struct SlotState {
  std::uint64_t pointer = 0;
  std::uint64_t bytes = 0;
  std::uint32_t allocated_line = 0;
  std::uint32_t freed_line = 0;  // 0 while live
};

class RmmCsvParser {
 public:
  RmmCsvParser(std::string_view text, std::string_view origin) : text_(text) {
    trace_.origin = std::string(origin);
    trace_.has_times = true;
    trace_.events.reserve(static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n')));
  }

  Trace run() {
    std::size_t position = 0;
    while (position < text_.size() || line_ == 0) {
      const std::size_t newline = text_.find('\n', position);
      const std::size_t end = newline == std::string_view::npos ? text_.size() : newline;
      if (line_ == std::numeric_limits<std::uint32_t>::max()) {
        fail("the log has more than 4294967295 lines; split it into several files");
      }
      ++line_;
      const std::string_view line = trim(text_.substr(position, end - position));
      if (line_ == 1) {
        check_header(line);
      } else if (!line.empty()) {
        parse_line(line);
      }
      position = end + 1;
    }
    trace_.slots = static_cast<std::uint32_t>(slots_.size());
    return std::move(trace_);
  }

 private:
  enum class TimeForm : std::uint8_t { unknown, time_of_day, epoch_seconds };

  [[noreturn]] void fail(std::string_view what) const {
    throw InvalidArgument(fmt::format("{}:{}: {}", trace_.origin, line_, what));
  }

  void check_header(std::string_view line) const {
    if (line == kRmmCsvHeader) return;
    fail(fmt::format("not an RMM log: the first line is {} where RMM's logging_resource_adaptor writes '{}'; pass "
                     "a log it wrote (RMM_LOG_FILE), with its header line",
                     quoted(line), kRmmCsvHeader));
  }

  void parse_line(std::string_view line) {
    std::array<std::string_view, kFieldCount> fields;
    std::size_t count = 0;
    std::size_t start = 0;
    while (true) {
      const std::size_t comma = line.find(',', start);
      const std::string_view field = line.substr(start, comma == std::string_view::npos ? line.size() - start
                                                                                         : comma - start);
      if (count < kFieldCount) fields[count] = trim(field);
      ++count;
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
    if (count != kFieldCount) {
      fail(fmt::format("{} comma-separated fields where RMM writes {} ({}); the line is cut or is not from RMM's "
                       "log: remove or repair it",
                       count, kFieldCount, kRmmCsvHeader));
    }

    TraceEvent event;
    event.line = line_;
    event.thread = thread_number(parse_thread(fields[0]));
    event.time_ns = elapsed_ns(parse_time(fields[1]));
    const std::string_view action = fields[2];
    const std::uint64_t pointer = parse_hex(fields[3], "pointer");
    event.bytes = parse_size(fields[4]);
    event.stream = parse_hex(fields[5], "stream");

    if (action == "allocate") {
      on_allocate(event, pointer);
    } else if (action == "free") {
      on_free(event, pointer);
    } else if (action == "allocate failure") {
      event.kind = TraceEvent::Kind::oom;
      trace_.events.push_back(event);
    } else {
      fail(fmt::format("unknown action {}; RMM's log has 'allocate', 'free' and 'allocate failure' in its third "
                       "column ({})",
                       quoted(action), kRmmCsvHeader));
    }
  }

  std::uint64_t parse_thread(std::string_view token) const {
    std::uint64_t thread = 0;
    bool out_of_range = false;
    if (parse_unsigned(token, thread, out_of_range)) return thread;
    if (out_of_range) fail(fmt::format("thread id {} is too large; it must fit in 64 bits", quoted(token)));
    fail(fmt::format("thread id {} is not a number; the first column is the decimal id of the thread that "
                     "allocated",
                     quoted(token)));
  }

  std::uint64_t parse_size(std::string_view token) const {
    std::uint64_t bytes = 0;
    bool out_of_range = false;
    if (parse_unsigned(token, bytes, out_of_range)) return bytes;
    if (out_of_range) fail(fmt::format("size {} is too large; it must fit in 64 bits", quoted(token)));
    fail(fmt::format("size {} is not a number; the fifth column is the size in bytes, a decimal integer",
                     quoted(token)));
  }

  // Pointer and Stream: hexadecimal, with or without "0x".
  std::uint64_t parse_hex(std::string_view token, std::string_view column) const {
    std::string_view digits = token;
    if (digits.size() > 2 && digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X')) digits.remove_prefix(2);
    std::uint64_t value = 0;
    bool out_of_range = false;
    if (parse_unsigned(digits, value, out_of_range, 16)) return value;
    if (out_of_range) fail(fmt::format("{} {} is too large; it must fit in 64 bits", column, quoted(token)));
    fail(fmt::format("{} {} is not a hexadecimal number; RMM writes addresses and streams as 0x7f3a40000000 (or "
                     "without the 0x)",
                     column, quoted(token)));
  }

  // The time of the line in ns: since midnight (HH:MM:SS.ffffff) or since the epoch (seconds.fraction).
  std::int64_t parse_time(std::string_view token) {
    const TimeForm form = token.find(':') != std::string_view::npos ? TimeForm::time_of_day : TimeForm::epoch_seconds;
    if (time_form_ != TimeForm::unknown && form != time_form_) {
      fail(fmt::format("time {} is written differently from the earlier lines ({}); every line of one log has the "
                       "same time format",
                       quoted(token), time_form_ == TimeForm::time_of_day ? "HH:MM:SS.ffffff" : "seconds.fraction"));
    }
    const std::optional<std::int64_t> stamp =
        form == TimeForm::time_of_day ? time_of_day_ns(token) : seconds_ns(token, kMaxEpochSeconds);
    if (!stamp) {
      fail(fmt::format("time {} is not a time; RMM writes the time of day as HH:MM:SS.ffffff (14:02:11.123456), "
                       "or seconds since the epoch (1634567890.123456)",
                       quoted(token)));
    }
    time_form_ = form;
    return *stamp;
  }

  // Nanoseconds since the first line. A time of day that falls by more than half a day from the line before
  // means the log ran past midnight; one that rises by more than half a day is a line written late, just after
  // midnight, about an event just before it. Lines slightly out of order (threads racing to the log) before the
  // first line's time count as time 0.
  std::uint64_t elapsed_ns(std::int64_t stamp) {
    if (!first_stamp_) {
      first_stamp_ = stamp;
      previous_stamp_ = stamp;
    }
    std::int64_t day = day_offset_;
    if (time_form_ == TimeForm::time_of_day) {
      if (stamp + kNsPerDay / 2 < previous_stamp_) {
        day_offset_ += kNsPerDay;
        day = day_offset_;
        previous_stamp_ = stamp;
      } else if (stamp > previous_stamp_ + kNsPerDay / 2 && day_offset_ > 0) {
        day = day_offset_ - kNsPerDay;
      } else {
        previous_stamp_ = stamp;
      }
    }
    const std::int64_t since_first = stamp + day - *first_stamp_;
    return since_first > 0 ? static_cast<std::uint64_t>(since_first) : 0;
  }

  // Small thread numbers from 1, in order of first appearance; 0 stays "unknown", as in the other formats.
  std::uint32_t thread_number(std::uint64_t thread_id) {
    if (thread_id == last_thread_id_ && last_thread_number_ != 0) return last_thread_number_;
    const auto [entry, added] =
        thread_numbers_.try_emplace(thread_id, static_cast<std::uint32_t>(thread_numbers_.size() + 1));
    last_thread_id_ = thread_id;
    last_thread_number_ = entry->second;
    return entry->second;
  }

  void on_allocate(TraceEvent& event, std::uint64_t pointer) {
    if (pointer == 0 && event.bytes != 0) {
      fail(fmt::format("allocate of {} bytes at pointer 0; only empty (0-byte) allocations have a null pointer, "
                       "so the line is damaged: repair or remove it",
                       event.bytes));
    }
    const std::uint32_t earlier = pointer != 0 ? slot_of_pointer_.find(pointer) : SparseIdMap::kAbsent;
    if (earlier != SparseIdMap::kAbsent && slots_[earlier].freed_line == 0) {
      fail(fmt::format("pointer {:#x} is allocated again while still live (allocated at line {}, not freed since); "
                       "the log misses a free, or two adaptors wrote to one file: give each its own RMM_LOG_FILE",
                       pointer, slots_[earlier].allocated_line));
    }
    if (slots_.size() >= kMaxSlots) fail("more than 4294967294 allocations; split the log into several files");
    if (!totals_.fits(event.bytes)) {
      fail(fmt::format("the live bytes pass 2^64 with this allocation of {} bytes; the size is wrong",
                       event.bytes));
    }

    const auto slot = static_cast<std::uint32_t>(slots_.size());
    if (pointer == 0) {
      // Empty allocations can share the null pointer: any live one matches a free of 0x0, all being 0 bytes.
      live_null_slots_.push_back(slot);
    } else if (earlier == SparseIdMap::kAbsent) {
      slot_of_pointer_.insert(pointer, slot);
    } else {
      slot_of_pointer_.reassign(pointer, slot);  // an address that came back after its free
    }
    slots_.push_back(SlotState{pointer, event.bytes, line_, 0});
    totals_.allocated(trace_, event.bytes);
    event.kind = TraceEvent::Kind::allocate;
    event.slot = slot;
    trace_.events.push_back(event);
  }

  void on_free(TraceEvent& event, std::uint64_t pointer) {
    const std::uint32_t slot = live_slot_of(pointer);
    SlotState& state = slots_[slot];
    if (state.bytes != event.bytes) {
      fail(fmt::format("free of {:#x} with size {}, but it was allocated with size {} at line {}; RMM frees with "
                       "the allocation's size, so lines are missing or two logs are mixed: use one complete log",
                       pointer, event.bytes, state.bytes, state.allocated_line));
    }
    state.freed_line = line_;
    totals_.freed(trace_, state.bytes);
    event.kind = TraceEvent::Kind::free;
    event.slot = slot;
    event.bytes = 0;  // as in the other readers: a free's size is its allocation's
    trace_.events.push_back(event);
  }

  std::uint32_t live_slot_of(std::uint64_t pointer) {
    if (pointer == 0) {
      if (live_null_slots_.empty()) {
        fail("free of pointer 0x0 with no empty allocation live; the log misses the allocate line or is cut at "
             "the start: use the whole log");
      }
      const std::uint32_t slot = live_null_slots_.back();
      live_null_slots_.pop_back();
      return slot;
    }
    const std::uint32_t slot = slot_of_pointer_.find(pointer);
    if (slot == SparseIdMap::kAbsent) {
      fail(fmt::format("free of pointer {:#x}, which was never allocated; the log misses its allocate line or is cut "
                       "at the start: use the whole log, from its header on",
                       pointer));
    }
    const SlotState& state = slots_[slot];
    if (state.freed_line != 0) {
      fail(fmt::format("free of pointer {:#x}, which was already freed at line {} (allocated at line {}); the log "
                       "misses an allocate line or two logs are mixed: use one complete log",
                       pointer, state.freed_line, state.allocated_line));
    }
    return slot;
  }

  std::string_view text_;
  Trace trace_;
  std::uint32_t line_ = 0;
  std::vector<SlotState> slots_;
  SparseIdMap slot_of_pointer_;  // the last slot at each address, live or freed
  std::vector<std::uint32_t> live_null_slots_;
  TraceTotals totals_;
  std::unordered_map<std::uint64_t, std::uint32_t> thread_numbers_;
  std::uint64_t last_thread_id_ = 0;
  std::uint32_t last_thread_number_ = 0;
  TimeForm time_form_ = TimeForm::unknown;
  std::optional<std::int64_t> first_stamp_;
  std::int64_t previous_stamp_ = 0;
  std::int64_t day_offset_ = 0;
};

}  // namespace

bool has_rmm_csv_header(std::string_view text) {
  if (text.substr(0, kRmmCsvHeader.size()) != kRmmCsvHeader) return false;
  const std::string_view rest = text.substr(kRmmCsvHeader.size());
  return rest.empty() || rest.front() == '\n' || rest.substr(0, 2) == "\r\n";
}

Trace parse_rmm_csv(std::string_view text, std::string_view origin) { return RmmCsvParser(text, origin).run(); }

}  // namespace plimsoll::telemetry
