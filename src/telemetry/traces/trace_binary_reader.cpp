// Reads plimsoll's binary trace format (telemetry/traces/trace_binary.hpp, docs/trace-format.md).
//
// Event records have one fixed size, so the loop copies 48 bytes per record and never parses text. Strings are
// collected as they come and resolved once the whole file is read, because call-site strings follow the events
// that name them.
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "plimsoll/error.hpp"
#include "telemetry/traces/id_map.hpp"
#include "telemetry/traces/step_markers.hpp"
#include "telemetry/traces/trace_binary.hpp"
#include "telemetry/traces/trace_totals.hpp"

namespace plimsoll::telemetry::binary {
namespace {

struct SlotState {
  std::uint64_t bytes = 0;
  bool live = false;
};

class BinaryParser {
 public:
  BinaryParser(std::string_view bytes, std::string_view origin) : bytes_(bytes) {
    trace_.origin = std::string(origin);
    trace_.has_times = true;
  }

  Trace run() {
    read_header();
    const std::uint64_t estimate = (bytes_.size() - sizeof(FileHeader)) / sizeof(EventRecord);
    trace_.events.reserve(static_cast<std::size_t>(estimate));
    while (position_ < bytes_.size()) {
      if (ended_) fail("data after the end record; the file was appended to after the recording closed: cut it at "
                       "the end record");
      ++record_;
      const auto kind = static_cast<RecordKind>(static_cast<std::uint8_t>(bytes_[position_]));
      if (kind == RecordKind::string) {
        if (!read_string()) break;
      } else if (!read_event(kind)) {
        break;
      }
    }
    if (auto unfinished = steps_.unfinished(); unfinished && ended_) {
      record_ = unfinished->line;
      fail(unfinished->message);
    }
    trace_.cut_short = !ended_;
    trace_.steps = std::move(steps_.steps());
    if (!trace_.steps.empty()) trace_.step_source = StepSource::markers;
    resolve_strings();
    trace_.slots = static_cast<std::uint32_t>(slots_.size());
    return std::move(trace_);
  }

 private:
  [[noreturn]] void fail(std::string_view what) const {
    throw InvalidArgument(fmt::format("{}: record {} (byte {}): {}", trace_.origin, record_, record_offset_, what));
  }

  void read_header() {
    if (bytes_.size() < sizeof(FileHeader) || !has_magic(bytes_)) {
      throw InvalidArgument(fmt::format("{}: not a plimsoll trace (no 'PLIMSOLL' header); pass a file written by "
                                        "plimsoll::Recording or the snapshot converter",
                                        trace_.origin));
    }
    FileHeader header;
    std::memcpy(&header, bytes_.data(), sizeof header);
    if (header.version != kVersion) {
      throw InvalidArgument(fmt::format("{}: trace format version {}, but this plimsoll reads version {}; read it "
                                        "with the plimsoll that wrote it",
                                        trace_.origin, header.version, kVersion));
    }
    if (header.event_record_bytes != sizeof(EventRecord)) {
      throw InvalidArgument(fmt::format("{}: event records of {} bytes, but version 1 has {}-byte records; the "
                                        "header is damaged",
                                        trace_.origin, header.event_record_bytes, sizeof(EventRecord)));
    }
    position_ = sizeof(FileHeader);
  }

  // False when the file ends inside the record: a recording cut short, kept up to here.
  bool read_string() {
    record_offset_ = position_;
    if (bytes_.size() - position_ < sizeof(StringRecordHeader)) return false;
    StringRecordHeader header;
    std::memcpy(&header, bytes_.data() + position_, sizeof header);
    if (header.length > kMaxStringBytes) {
      fail(fmt::format("a string of {} bytes; strings hold at most {} bytes", header.length, kMaxStringBytes));
    }
    const std::uint64_t size = string_record_bytes(header.length);
    if (bytes_.size() - position_ < size) return false;
    if (header.id == 0) fail("string id 0; ids start at 1 (0 means 'none' in event records)");
    std::string text(bytes_.substr(position_ + sizeof header, header.length));
    const auto table = static_cast<std::uint8_t>(header.table);
    if (table < 1 || table > 4) fail(fmt::format("unknown string table {}; tables are 1 tag, 2 site, 3 marker, 4 device",
                                                 table));
    auto& strings = tables_[table - 1];
    if (!strings.emplace(header.id, std::move(text)).second) {
      fail(fmt::format("string id {} is defined twice in the same table; give each string its own id", header.id));
    }
    position_ += static_cast<std::size_t>(size);
    return true;
  }

  bool read_event(RecordKind kind) {
    record_offset_ = position_;
    if (bytes_.size() - position_ < sizeof(EventRecord)) return false;
    EventRecord record;
    std::memcpy(&record, bytes_.data() + position_, sizeof record);
    position_ += sizeof record;

    TraceEvent event;
    event.line = record_ <= std::numeric_limits<std::uint32_t>::max() ? static_cast<std::uint32_t>(record_) : 0;
    event.device = record.device;
    event.tag = record.tag;
    event.site = record.site;
    event.thread = record.thread;
    event.time_ns = record.time_ns;
    event.stream = record.stream;
    event.bytes = record.bytes;
    switch (kind) {
      case RecordKind::allocate: allocate(record, event); break;
      case RecordKind::free: free(record, event); break;
      case RecordKind::map: event.kind = TraceEvent::Kind::map; break;
      case RecordKind::unmap: event.kind = TraceEvent::Kind::unmap; break;
      case RecordKind::oom: event.kind = TraceEvent::Kind::oom; break;
      case RecordKind::marker: marker(record, event); break;
      case RecordKind::end:
        if (record.id != record_ - 1) {
          fail(fmt::format("the end record counts {} records before it, but the file has {}; records were lost or "
                           "added",
                           record.id, record_ - 1));
        }
        ended_ = true;
        return true;
      default:
        fail(fmt::format("unknown record kind {}; the file is damaged or was written by a newer plimsoll",
                         static_cast<unsigned>(kind)));
    }
    trace_.events.push_back(event);
    return true;
  }

  SparseIdMap& ids_of(std::uint16_t device) {
    if (device >= ids_.size()) ids_.resize(static_cast<std::size_t>(device) + 1);
    return ids_[device];
  }

  void allocate(const EventRecord& record, TraceEvent& event) {
    if (record.id == 0) fail("allocation with id 0; ids are nonzero");
    if (slots_.size() >= std::numeric_limits<std::uint32_t>::max() - 1) {
      fail("more than 4294967294 allocations; split the trace");
    }
    SparseIdMap& ids = ids_of(record.device);
    const auto slot = static_cast<std::uint32_t>(slots_.size());
    const std::uint32_t earlier = ids.find(record.id);
    if (earlier == SparseIdMap::kAbsent) {
      ids.insert(record.id, slot);
    } else if (slots_[earlier].live) {
      fail(fmt::format("allocation of id {:#x}, which is still live; free it before it is allocated again",
                       record.id));
    } else {
      ids.reassign(record.id, slot);  // an address that came back after its free
    }
    slots_.push_back(SlotState{record.bytes, true});
    totals_.allocated(trace_, record.bytes);
    event.kind = TraceEvent::Kind::allocate;
    event.slot = slot;
  }

  void free(const EventRecord& record, TraceEvent& event) {
    const std::uint32_t slot = ids_of(record.device).find(record.id);
    if (slot == SparseIdMap::kAbsent || !slots_[slot].live) {
      fail(fmt::format("free of id {:#x}, which is not live on this device; every free must follow its allocation",
                       record.id));
    }
    slots_[slot].live = false;
    totals_.freed(trace_, slots_[slot].bytes);
    event.kind = TraceEvent::Kind::free;
    event.slot = slot;
    event.bytes = 0;
  }

  void marker(const EventRecord& record, TraceEvent& event) {
    const auto found = tables_[2].find(static_cast<std::uint32_t>(record.id));
    if (record.id > std::numeric_limits<std::uint32_t>::max() || found == tables_[2].end()) {
      fail(fmt::format("marker string {} is not defined before the marker; the writer must define it first",
                       record.id));
    }
    event.kind = TraceEvent::Kind::marker;
    event.slot = static_cast<std::uint32_t>(trace_.markers.size());
    event.bytes = 0;
    trace_.markers.push_back(found->second);
    if (auto error = steps_.on_marker(found->second, trace_.events.size(), event.line)) fail(*error);
  }

  // Event ids -> dense indices into Trace::tags / sites / devices; an id no string record defines is an error.
  void resolve_strings() {
    const auto remap = [&](std::unordered_map<std::uint32_t, std::string>& strings, std::vector<std::string>& names,
                           std::string_view what) {
      std::unordered_map<std::uint32_t, std::uint32_t> index;
      for (auto& [id, text] : strings) {
        index.emplace(id, static_cast<std::uint32_t>(names.size()));
        names.push_back(std::move(text));
      }
      if (names.size() > 65536 && what != "site") {
        throw InvalidArgument(fmt::format("{}: more than 65535 {} strings; the format allows 65535", trace_.origin,
                                          what));
      }
      return [index = std::move(index), what, this](std::uint32_t id, std::uint32_t line) -> std::uint32_t {
        if (id == 0) return 0;
        const auto found = index.find(id);
        if (found == index.end()) {
          // Call-site names are written when the recording closes: a recording cut short (a killed process) has
          // events whose sites were never named. They read as unknown sites; any other missing name is damage.
          if (what == "site" && trace_.cut_short) return 0;
          throw InvalidArgument(fmt::format("{}: record {}: {} id {} is never defined; the file is damaged",
                                            trace_.origin, line, what, id));
        }
        return found->second;
      };
    };
    const auto tag = remap(tables_[0], trace_.tags, "tag");
    const auto site = remap(tables_[1], trace_.sites, "site");
    const auto device = remap(tables_[3], trace_.devices, "device");
    for (TraceEvent& event : trace_.events) {
      event.tag = static_cast<std::uint16_t>(tag(event.tag, event.line));
      event.site = site(event.site, event.line);
      event.device = static_cast<std::uint16_t>(device(event.device, event.line));
    }
  }

  std::string_view bytes_;
  Trace trace_;
  std::size_t position_ = 0;
  std::size_t record_offset_ = 0;
  std::uint64_t record_ = 0;
  bool ended_ = false;
  std::vector<SparseIdMap> ids_;  // per device: addresses of different devices may coincide
  std::vector<SlotState> slots_;
  TraceTotals totals_;
  std::unordered_map<std::uint32_t, std::string> tables_[4];  // tag, site, marker, device
  StepMarkers steps_;
};

}  // namespace

Trace parse_binary_trace(std::string_view bytes, std::string_view origin) { return BinaryParser(bytes, origin).run(); }

}  // namespace plimsoll::telemetry::binary
