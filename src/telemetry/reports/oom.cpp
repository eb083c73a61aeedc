// Out-of-memory reports: which of four causes it was, read from the numbers, and one thing to do about it.
#include "plimsoll/oom.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "plimsoll/size.hpp"
#include "util/checked_math.hpp"

namespace plimsoll {
namespace {

// The numbers come from a live device, but explain_oom is public: inconsistent ones must not wrap around, so
// sums and differences saturate.
using util::saturating_add;
using util::saturating_subtract;
// Devices map whole granules: a fresh range for `bytes` takes this many.
std::uint64_t whole_granules(std::uint64_t bytes, std::uint64_t granule) {
  if (granule == 0) return bytes;
  return util::checked_round_up(bytes, granule).value_or(std::numeric_limits<std::uint64_t>::max());
}

std::string_view meaning(OomCause cause) {
  switch (cause) {
    case OomCause::limit_too_low:
      return "live allocations plus this request exceed the limit";
    case OomCause::fragmented:
      return "enough free bytes in reserved memory, but no free block large enough";
    case OomCause::held_in_cache:
      return "free memory stayed mapped and could not be given back to make room under the limit";
    case OomCause::device_taken:
      return "the limit was not reached, but the device had no memory left to give";
  }
  return "";
}

std::string largest_tag(const OomDetails& d) {
  if (d.top_tags.empty()) return {};
  const TagStats& top = d.top_tags.front();
  return fmt::format("; the largest tag is \"{}\" with {}", top.tag, format_size(top.in_use_bytes));
}

// The least any placement of the live data and the request maps: their bytes, in whole granules where the device
// maps granules.
std::uint64_t least_mapped(const OomDetails& d) {
  return whole_granules(saturating_add(d.in_use_bytes, d.rounded_bytes), d.granule_bytes);
}

// What the limit lets the device map: whole granules only, so a limit below one granule maps nothing.
std::uint64_t mappable_under_limit(const OomDetails& d) {
  return d.granule_bytes == 0 ? d.limit_bytes : util::round_down(d.limit_bytes, d.granule_bytes);
}

std::string suggest_for_limit(const OomDetails& d) {
  const std::uint64_t needed = least_mapped(d);
  const std::uint64_t shortfall = saturating_subtract(needed, d.limit_bytes);
  if (d.device_total_bytes != 0 && needed > d.device_total_bytes) {
    return fmt::format(
        "needs at least {} more than the limit {}, and {} in all is more than the device's {}: reduce the batch "
        "size or keep less data on {}{}",
        format_size(shortfall), format_size(d.limit_bytes), format_size(needed), format_size(d.device_total_bytes),
        d.device, largest_tag(d));
  }
  std::string fraction;
  if (d.device_total_bytes != 0) {
    // Rounded up to hundredths, so the fraction the message names is enough.
    const double share = static_cast<double>(needed) / static_cast<double>(d.device_total_bytes);
    fraction = fmt::format(" (or memory_fraction >= {:.2f})", std::min(1.0, std::ceil(share * 100.0) / 100.0));
  }
  // Where the bytes fit and the granules do not, the message says why the limit it names is above them.
  const std::string granules =
      saturating_add(d.in_use_bytes, d.rounded_bytes) <= d.limit_bytes
          ? fmt::format(" (the device maps whole granules of {})", format_size(d.granule_bytes))
          : std::string();
  return fmt::format("needs at least {} more: raise memory_limit to >= {}{}{}, or reduce the batch size{}",
                     format_size(shortfall), format_size(needed), granules, fraction, largest_tag(d));
}

std::string suggest_for_device(const OomDetails& d) {
  const std::string held_by_others =
      d.device_total_bytes == 0
          ? std::string("other processes (or other devices of this process on the same hardware) hold the rest")
          : fmt::format(
                "other processes (or other devices of this process on the same hardware) hold about {} of "
                "its {}",
                format_size(saturating_subtract(saturating_subtract(d.device_total_bytes, d.device_free_bytes),
                                                d.reserved_bytes)),
                format_size(d.device_total_bytes));
  const std::string claim_early =
      d.policy == "preallocate" ? "" : ", or set growth to preallocate to claim the budget when the device is created";
  if (d.device_free_bytes >= d.rounded_bytes) {
    // The device said it had room but refused the mapping: taken between the query and the map, or its address
    // space (not its memory) ran out.
    return fmt::format(
        "{} refused to map {} although it reported {} free; the limit {} was not reached. Memory was probably taken "
        "by another process meanwhile; {}: stop them{}",
        d.device, format_size(d.rounded_bytes), format_size(d.device_free_bytes), format_size(d.limit_bytes),
        held_by_others, claim_early);
  }
  return fmt::format(
      "{} has only {} free, less than the {} this allocation needed to grow, though the limit {} was not reached "
      "({} reserved here); {}: stop them, or set memory_limit to at most {} so this process plans for what it can "
      "get{}",
      d.device, format_size(d.device_free_bytes), format_size(d.rounded_bytes), format_size(d.limit_bytes),
      format_size(d.reserved_bytes), held_by_others, format_size(saturating_add(d.reserved_bytes, d.device_free_bytes)),
      claim_early);
}

std::string suggest_for_fragments(const OomDetails& d) {
  const std::string facts = fmt::format(
      "{} is free in reserved memory but the largest free block is {}, smaller than the {} requested",
      format_size(d.free_in_reserved_bytes), format_size(d.largest_free_block), format_size(d.rounded_bytes));
  if (d.policy == "preallocate") {
    // A preallocated budget is never unmapped, so nothing can be placed anew: only the order of allocations helps.
    return fmt::format(
        "{}: allocate large, long-lived buffers first so short-lived ones do not split the space between them, or "
        "set growth to on_demand so free granules can be given back and mapped again in one piece",
        facts);
  }
  // The engine gave back every cached granule before failing, so what stays free shares granules with live
  // allocations: trim() cannot help, a larger limit or another allocation order can.
  return fmt::format(
      "{}; the free bytes share granules with live allocations, so they cannot be given back: allocate large, "
      "long-lived buffers first so short-lived ones do not split the space between them, or raise memory_limit "
      "to >= {} to leave room for a fresh range",
      facts, format_size(saturating_add(d.reserved_bytes, whole_granules(d.rounded_bytes, d.granule_bytes))));
}

std::string suggest_for_cache(const OomDetails& d) {
  const std::uint64_t must_release =
      saturating_subtract(saturating_add(d.reserved_bytes, d.rounded_bytes), d.limit_bytes);
  const std::uint64_t threshold = saturating_subtract(d.limit_bytes, saturating_add(d.in_use_bytes, d.rounded_bytes));
  return fmt::format(
      "{} of free memory is still mapped and {} of it had to be given back to fit {} under the limit {}: call trim() "
      "before large allocations, or set release_threshold to <= {} so the cache never grows that large",
      format_size(d.free_in_reserved_bytes), format_size(must_release), format_size(d.rounded_bytes),
      format_size(d.limit_bytes), format_size(threshold));
}

}  // namespace

std::string_view to_string(OomCause cause) {
  switch (cause) {
    case OomCause::limit_too_low:
      return "limit_too_low";
    case OomCause::fragmented:
      return "fragmented";
    case OomCause::held_in_cache:
      return "held_in_cache";
    case OomCause::device_taken:
      return "device_taken";
  }
  return "unknown";
}

// The checks, in order; the first that holds is the cause. R = rounded request, L = limit, U = in use,
// S = reserved (mapped), C = free in reserved (S - U), B = largest free block.
//   1. limit_too_low: U + R > L, or, where the device maps granules of G bytes, U + R in whole granules is more
//      than the whole granules L holds (a limit under one granule maps nothing). The live data alone leaves no
//      room: no release, defragmenting or stopping another process can help, so it goes first, and it is the only
//      cause whose fix is "use less or allow more".
//   2. device_taken: the engine says the device refused memory the limit allowed (device_refused). Read from
//      the engine, not the numbers: whether the limit allowed a mapping depends on where the block would go.
//   3. fragmented: C >= R and B < R. Growing would pass the limit, and the free bytes already mapped would be
//      enough, but no single block is large enough.
//   4. held_in_cache: the rest (U + R <= L, no refusal, C < R). The request fits under the limit only if cached free
//      memory is given back, and the engine could not give back enough (free space in granules that live
//      allocations share).
// 3 and 4 split what is left.
OomDetails explain_oom(OomDetails numbers) {
  OomDetails d = std::move(numbers);
  if (saturating_add(d.in_use_bytes, d.rounded_bytes) > d.limit_bytes || least_mapped(d) > mappable_under_limit(d)) {
    d.cause = OomCause::limit_too_low;
    d.suggestion = suggest_for_limit(d);
  } else if (d.device_refused) {
    d.cause = OomCause::device_taken;
    d.suggestion = suggest_for_device(d);
  } else if (d.free_in_reserved_bytes >= d.rounded_bytes && d.largest_free_block < d.rounded_bytes) {
    d.cause = OomCause::fragmented;
    d.suggestion = suggest_for_fragments(d);
  } else {
    d.cause = OomCause::held_in_cache;
    d.suggestion = suggest_for_cache(d);
  }
  return d;
}

std::string format_oom(const OomDetails& d) {
  // Free bytes in reserved memory are all useless to this request when even the largest block is too small.
  const std::uint64_t fragmented = d.largest_free_block < d.rounded_bytes ? d.free_in_reserved_bytes : 0;
  std::string text = fmt::format("plimsoll: out of memory on {} allocating {} (rounded to {}) for tag \"{}\"\n",
                                 d.device, format_size(d.requested_bytes), format_size(d.rounded_bytes), d.tag);
  const auto line = [&text](std::string_view label, std::string_view value) {
    text += fmt::format("  {:<20}{}\n", label.empty() ? std::string() : fmt::format("{}:", label), value);
  };
  line("policy", d.policy);
  line("limit", format_size(d.limit_bytes));
  line("in use", format_size(d.in_use_bytes));
  line("reserved", format_size(d.reserved_bytes));
  line("largest free block", format_size(d.largest_free_block));
  line("fragmented",
       fmt::format("{} (free in reserved memory that cannot serve this request)", format_size(fragmented)));
  line("device free", d.device_total_bytes == 0 ? format_size(d.device_free_bytes)
                                                : fmt::format("{} of {}", format_size(d.device_free_bytes),
                                                              format_size(d.device_total_bytes)));
  if (d.top_tags.empty()) {
    line("top tags", "none");
  } else {
    constexpr std::size_t kShownTags = 5;
    const std::size_t shown = std::min(d.top_tags.size(), kShownTags);
    for (std::size_t i = 0; i < shown; ++i) {
      const TagStats& tag = d.top_tags[i];
      line(i == 0 ? "top tags" : "",
           fmt::format("\"{}\" {} in {} allocation{} (peak {})", tag.tag, format_size(tag.in_use_bytes),
                       tag.allocations, tag.allocations == 1 ? "" : "s", format_size(tag.peak_in_use_bytes)));
    }
  }
  line("cause", fmt::format("{} ({})", to_string(d.cause), meaning(d.cause)));
  text += fmt::format("  suggestion: {}", d.suggestion);
  return text;
}

OutOfMemory::OutOfMemory(OomDetails details) : Error(format_oom(details)), details_(std::move(details)) {}

}  // namespace plimsoll
