#pragma once
// The on-disk layout of plimsoll's trace format, version 1 (docs/trace-format.md is the specification; this
// header is its only C++ transcription, shared by the writer and the reader).
#include <bit>
#include <cstdint>
#include <string>
#include <string_view>

#include "plimsoll/trace.hpp"

namespace plimsoll::telemetry::binary {

static_assert(std::endian::native == std::endian::little,
              "the trace format is little-endian and this code writes structs as they are in memory");

inline constexpr char kMagic[8] = {'P', 'L', 'I', 'M', 'S', 'O', 'L', 'L'};
inline constexpr std::uint32_t kVersion = 1;

struct FileHeader {
  char magic[8];
  std::uint32_t version;
  std::uint32_t event_record_bytes;
  std::uint64_t start_unix_ns;
  std::uint64_t reserved;
};
static_assert(sizeof(FileHeader) == 32);

enum class RecordKind : std::uint8_t { allocate = 1, free = 2, map = 3, unmap = 4, oom = 5, marker = 6, string = 7, end = 8 };

struct EventRecord {
  RecordKind kind;
  std::uint8_t flags;
  std::uint16_t device;
  std::uint16_t tag;
  std::uint16_t reserved;
  std::uint32_t thread;
  std::uint32_t site;
  std::uint64_t time_ns;
  std::uint64_t id;
  std::uint64_t bytes;
  std::uint64_t stream;
};
static_assert(sizeof(EventRecord) == 48 && alignof(EventRecord) == 8);

enum class StringTable : std::uint8_t { tag = 1, site = 2, marker = 3, device = 4 };

struct StringRecordHeader {
  RecordKind kind;  // RecordKind::string
  StringTable table;
  std::uint16_t reserved;
  std::uint32_t id;
  std::uint32_t length;
  std::uint32_t reserved2;
};
static_assert(sizeof(StringRecordHeader) == 16);

inline constexpr std::uint32_t kMaxStringBytes = 65536;

/// Bytes a string record of `length` text bytes takes, padding included.
constexpr std::uint64_t string_record_bytes(std::uint64_t length) { return 16 + ((length + 7) & ~std::uint64_t{7}); }

/// True when `bytes` starts with the format's magic.
inline bool has_magic(std::string_view bytes) {
  return bytes.size() >= sizeof kMagic && bytes.substr(0, sizeof kMagic) == std::string_view(kMagic, sizeof kMagic);
}

/// Reads a whole binary trace held in memory. Throws InvalidArgument "FILE: record N (byte X): ...; fix".
Trace parse_binary_trace(std::string_view bytes, std::string_view origin);

}  // namespace plimsoll::telemetry::binary
