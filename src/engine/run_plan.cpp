// Run plans on disk (run_plan.hpp). One JSON object: the header's fields, then "entries": [[size, offset], ...],
// one entry a line. The writer streams the entries with fmt (a plan reaches 10^6 entries: no JSON tree of them
// is built); the reader parses the file as one document and checks every invariant of run_plan.hpp before it
// returns, so a follower never sees a plan it cannot trust on its face (overlaps excepted, as the header says).
#include "engine/run_plan.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <memory>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "engine/heap.hpp"
#include "plimsoll/error.hpp"

namespace plimsoll::engine {
namespace {

constexpr const char* kFormatName = "plimsoll-run-plan";
constexpr const char* kFix = "pack it again with `plimsoll run-plan TRACE -o PLAN`";

[[noreturn]] void refuse(const std::string& path, const std::string& what) {
  throw InvalidArgument(fmt::format("run plan {}: {}; {}", path, what, kFix));
}

std::uint64_t unsigned_field(const nlohmann::json& doc, const char* key, const std::string& path) {
  const auto it = doc.find(key);
  if (it == doc.end()) refuse(path, fmt::format("no \"{}\" field", key));
  if (!it->is_number_unsigned()) refuse(path, fmt::format("\"{}\" is {}, not a whole number of 0 or more", key,
                                                          it->dump()));
  return it->get<std::uint64_t>();
}

bool rounded(std::uint64_t size) { return size > 0 && size % Heap::kQuantum == 0; }

// The granules [offset, offset + size) cover, united over every entry: the ranges sorted, then merged.
std::uint64_t covered(const std::vector<RunPlan::Entry>& entries, std::uint64_t granule) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;  // granule ranges [first, last)
  ranges.reserve(entries.size());
  for (const RunPlan::Entry& e : entries)
    if (e.size != 0) ranges.emplace_back(e.offset / granule, (e.offset + e.size - 1) / granule + 1);
  std::sort(ranges.begin(), ranges.end());
  std::uint64_t count = 0, counted_end = 0;
  for (const auto& [first, last] : ranges) {
    const std::uint64_t from = std::max(first, counted_end);
    if (last > from) count += last - from;
    counted_end = std::max(counted_end, last);
  }
  return count;
}

}  // namespace

std::uint64_t count_covered_granules(const std::vector<RunPlan::Entry>& entries, std::uint64_t granule) {
  return covered(entries, granule);
}

RunPlan read_run_plan(const std::string& path) {
  const std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  const auto cannot_read = [&path](int error) {
    return InvalidArgument(fmt::format("run plan {}: cannot be opened ({}); give the path of a plan written by "
                                       "`plimsoll run-plan TRACE -o PLAN`",
                                       path, std::strerror(error)));
  };
  if (!file) throw cannot_read(errno);
  std::string text;
  std::array<char, 1 << 16> buffer{};
  std::size_t count = 0;
  do {
    count = std::fread(buffer.data(), 1, buffer.size(), file.get());
    text.append(buffer.data(), count);
  } while (count == buffer.size());
  if (std::ferror(file.get())) throw cannot_read(errno);  // a folder opens, then fails here with EISDIR
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& error) {
    if (error.byte >= text.size()) {
      refuse(path, fmt::format("the file ends before the plan does (truncated at {} bytes?)", text.size()));
    }
    refuse(path, fmt::format("not JSON ({})", error.what()));
  }
  if (!doc.is_object()) refuse(path, "not a run plan (the file is JSON but not an object)");
  const auto format = doc.find("format");
  if (format == doc.end() || !format->is_string() || format->get<std::string>() != kFormatName) {
    refuse(path, fmt::format("not a run plan (\"format\" is {}, not \"{}\")",
                             format == doc.end() ? std::string("missing") : format->dump(), kFormatName));
  }
  const auto version = doc.find("version");
  if (version == doc.end() || !version->is_number_integer() ||
      version->get<std::int64_t>() != RunPlan::kFormatVersion) {
    refuse(path, fmt::format("format version {}, where this plimsoll reads version {}",
                             version == doc.end() ? std::string("missing") : version->dump(), RunPlan::kFormatVersion));
  }

  RunPlan plan;
  plan.granule = unsigned_field(doc, "granule", path);
  if (!std::has_single_bit(plan.granule) || plan.granule < Heap::kQuantum) {
    refuse(path, fmt::format("granule {} is not a power of two of at least {} bytes", plan.granule, Heap::kQuantum));
  }
  plan.limit = unsigned_field(doc, "limit", path);
  plan.covered_granules = unsigned_field(doc, "covered_granules", path);
  plan.through_step = unsigned_field(doc, "through_step", path);
  const auto source = doc.find("source");
  if (source == doc.end() || !source->is_string()) refuse(path, "no \"source\" string (the trace it was packed from)");
  plan.source = source->get<std::string>();

  const auto entries = doc.find("entries");
  if (entries == doc.end() || !entries->is_array()) refuse(path, "no \"entries\" array");
  plan.entries.reserve(entries->size());
  for (std::size_t i = 0; i < entries->size(); ++i) {
    const nlohmann::json& e = (*entries)[i];
    if (!e.is_array() || e.size() != 2 || !e[0].is_number_unsigned() || !e[1].is_number_unsigned()) {
      refuse(path, fmt::format("entry {} is {}, not [size, offset] (two whole numbers)", i, e.dump()));
    }
    const RunPlan::Entry entry{e[0].get<std::uint64_t>(), e[1].get<std::uint64_t>()};
    if (!rounded(entry.size)) {
      refuse(path, fmt::format("entry {}: size {} is not a rounded size (a multiple of {} above 0)", i, entry.size,
                               Heap::kQuantum));
    }
    if (entry.offset % Heap::kQuantum != 0) {
      refuse(path, fmt::format("entry {}: offset {} is not a multiple of {} (the heap's alignment)", i, entry.offset,
                               Heap::kQuantum));
    }
    if (entry.offset > std::numeric_limits<std::uint64_t>::max() - entry.size) {
      refuse(path, fmt::format("entry {}: offset {} + size {} passes 2^64", i, entry.offset, entry.size));
    }
    plan.entries.push_back(entry);
  }

  const auto fingerprint = doc.find("fingerprint");
  if (fingerprint == doc.end() || !fingerprint->is_array()) refuse(path, "no \"fingerprint\" array");
  if (fingerprint->size() > RunPlan::kFingerprint) {
    refuse(path, fmt::format("the fingerprint has {} sizes, more than {}", fingerprint->size(), RunPlan::kFingerprint));
  }
  const std::size_t expected = std::min(RunPlan::kFingerprint, plan.entries.size());
  if (fingerprint->size() != expected) {
    refuse(path, fmt::format("the fingerprint has {} sizes where the plan's {} entries give {}", fingerprint->size(),
                             plan.entries.size(), expected));
  }
  for (std::size_t i = 0; i < fingerprint->size(); ++i) {
    const nlohmann::json& f = (*fingerprint)[i];
    if (!f.is_number_unsigned() || f.get<std::uint64_t>() != plan.entries[i].size) {
      refuse(path, fmt::format("fingerprint size {} is {}, where entry {} has size {}", i, f.dump(), i,
                               plan.entries[i].size));
    }
    plan.fingerprint.push_back(plan.entries[i].size);
  }

  const std::uint64_t counted = covered(plan.entries, plan.granule);
  if (counted != plan.covered_granules) {
    refuse(path, fmt::format("covered_granules is {}, where the entries cover {} granules", plan.covered_granules,
                             counted));
  }
  return plan;
}

void write_run_plan(const RunPlan& plan, const std::string& path) {
  const std::filesystem::path target(path);
  // Beside the target (same file system, so the rename is atomic), named by the process so two writers never share.
  const std::filesystem::path temp =
      target.parent_path() / fmt::format(".{}.{}.tmp", target.filename().string(), static_cast<long>(::getpid()));
  std::FILE* out = std::fopen(temp.c_str(), "wb");
  if (out == nullptr) {
    throw Error(fmt::format("run plan {}: cannot write {} ({}); give -o a path in a writable folder", path,
                            temp.string(), std::strerror(errno)));
  }
  std::string text = fmt::format(
      "{{\"format\":\"{}\",\"version\":{},\"granule\":{},\"limit\":{},\"covered_granules\":{},\"through_step\":{},"
      "\"source\":{},\n\"fingerprint\":{},\n\"entries\":[",
      kFormatName, RunPlan::kFormatVersion, plan.granule, plan.limit, plan.covered_granules, plan.through_step,
      nlohmann::json(plan.source).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
      nlohmann::json(plan.fingerprint).dump());
  bool written = std::fwrite(text.data(), 1, text.size(), out) == text.size();
  fmt::memory_buffer buffer;
  for (std::size_t i = 0; i < plan.entries.size() && written; ++i) {
    fmt::format_to(std::back_inserter(buffer), "{}\n[{},{}]", i == 0 ? "" : ",", plan.entries[i].size,
                   plan.entries[i].offset);
    if (buffer.size() >= (1u << 16) || i + 1 == plan.entries.size()) {
      written = std::fwrite(buffer.data(), 1, buffer.size(), out) == buffer.size();
      buffer.clear();
    }
  }
  text = "\n]}\n";
  written = written && std::fwrite(text.data(), 1, text.size(), out) == text.size();
  const int saved = errno;
  const bool closed = std::fclose(out) == 0;
  if (!written || !closed) {
    std::error_code ignored;
    std::filesystem::remove(temp, ignored);
    throw Error(fmt::format("run plan {}: writing {} failed ({}); free space or give -o another path", path,
                            temp.string(), std::strerror(written ? errno : saved)));
  }
  std::error_code renamed;
  std::filesystem::rename(temp, target, renamed);
  if (renamed) {
    std::error_code ignored;
    std::filesystem::remove(temp, ignored);
    throw Error(fmt::format("run plan {}: cannot replace it with {} ({}); give -o another path", path, temp.string(),
                            renamed.message()));
  }
}

void save_run_plan(const RunPlan& plan, const std::string& path) {
  write_run_plan(plan, path);
  if (read_run_plan(path) != plan) {
    throw Error(fmt::format("run plan {}: read back, it differs from the plan written (a file system that changed "
                            "it?); write it again, or to another path",
                            path));
  }
}

}  // namespace plimsoll::engine
