#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "plimsoll/oom.hpp"

namespace plimsoll {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;

TagStats tag(const std::string& name, std::uint64_t bytes, std::uint64_t live) {
  return TagStats{.tag = name, .in_use_bytes = bytes, .peak_in_use_bytes = bytes, .allocations = live};
}

/// An 80 GiB GPU with an 8 GiB limit; each test moves the numbers that make its cause.
OomDetails gpu_numbers() {
  OomDetails d;
  d.requested_bytes = 1 * kGiB;
  d.rounded_bytes = 1 * kGiB;
  d.device = "cuda:0";
  d.policy = "on_demand";
  d.tag = "activations";
  d.limit_bytes = 8 * kGiB;
  d.device_free_bytes = 40 * kGiB;
  d.device_total_bytes = 80 * kGiB;
  d.top_tags = {tag("weights", 4 * kGiB, 120), tag("activations", 2 * kGiB, 33)};
  return d;
}

void set_usage(OomDetails& d, std::uint64_t in_use, std::uint64_t reserved, std::uint64_t largest_free) {
  d.in_use_bytes = in_use;
  d.reserved_bytes = reserved;
  d.free_in_reserved_bytes = reserved - in_use;
  d.largest_free_block = largest_free;
}

TEST(OomCauseNames, AreTheEnumeratorNames) {
  EXPECT_EQ(to_string(OomCause::limit_too_low), "limit_too_low");
  EXPECT_EQ(to_string(OomCause::fragmented), "fragmented");
  EXPECT_EQ(to_string(OomCause::held_in_cache), "held_in_cache");
  EXPECT_EQ(to_string(OomCause::device_taken), "device_taken");
}

TEST(ExplainOom, LimitTooLowNamesTheShortfallTheLimitTheFractionAndTheLargestTag) {
  OomDetails d = gpu_numbers();
  d.requested_bytes = 3 * kGiB;
  d.rounded_bytes = 3 * kGiB;
  set_usage(d, 6 * kGiB, 7 * kGiB, 512 * kMiB);
  const OomDetails explained = explain_oom(d);
  EXPECT_EQ(explained.cause, OomCause::limit_too_low);
  // 6 GiB live + 3 GiB = 9 GiB, 1 GiB over the limit; 9/80 = 0.1125, rounded up to 0.12.
  EXPECT_EQ(explained.suggestion,
            "needs at least 1.00 GiB more: raise memory_limit to >= 9.00 GiB (or memory_fraction >= 0.12), or reduce "
            "the batch size; the largest tag is \"weights\" with 4.00 GiB");
}

TEST(ExplainOom, LimitTooLowWithoutTheTotalLeavesTheFractionOut) {
  OomDetails d = gpu_numbers();
  d.device_total_bytes = 0;
  d.top_tags.clear();
  set_usage(d, 7680 * kMiB, 7680 * kMiB, 0);
  const OomDetails explained = explain_oom(d);
  EXPECT_EQ(explained.cause, OomCause::limit_too_low);
  EXPECT_EQ(explained.suggestion,
            "needs at least 512.00 MiB more: raise memory_limit to >= 8.50 GiB, or reduce the "
            "batch size");
}

TEST(ExplainOom, LimitTooLowBeyondTheWholeDeviceSaysSo) {
  OomDetails d = gpu_numbers();
  d.rounded_bytes = 20 * kGiB;
  d.limit_bytes = 60 * kGiB;
  set_usage(d, 61 * kGiB, 62 * kGiB, 1 * kGiB);
  const OomDetails explained = explain_oom(d);
  EXPECT_EQ(explained.cause, OomCause::limit_too_low);
  EXPECT_THAT(explained.suggestion, HasSubstr("needs at least 21.00 GiB more than the limit 60.00 GiB"));
  EXPECT_THAT(explained.suggestion, HasSubstr("81.00 GiB in all is more than the device's 80.00 GiB"));
  EXPECT_THAT(explained.suggestion, HasSubstr("reduce the batch size"));
  EXPECT_THAT(explained.suggestion, Not(HasSubstr("memory_fraction")));
}

TEST(ExplainOom, DeviceTakenNamesWhatOthersHoldAndALimitThatFits) {
  OomDetails d = gpu_numbers();
  d.device_refused = true;
  d.device_free_bytes = 256 * kMiB;
  set_usage(d, 2 * kGiB, 2 * kGiB, 0);
  const OomDetails explained = explain_oom(d);
  EXPECT_EQ(explained.cause, OomCause::device_taken);
  // 80 GiB total - 256 MiB free - 2 GiB of ours = 77.75 GiB held elsewhere.
  EXPECT_EQ(explained.suggestion,
            "cuda:0 has only 256.00 MiB free, less than the 1.00 GiB this allocation needed to grow, though the limit "
            "8.00 GiB was not reached (2.00 GiB reserved here); other processes (or other devices of this process on "
            "the same hardware) hold about 77.75 GiB of its 80.00 GiB: stop them, or set memory_limit to at most "
            "2.25 GiB so this process plans for what it can get, or set growth to preallocate to claim the budget "
            "when the device is created");
}

TEST(ExplainOom, DeviceTakenWhenTheDeviceReportedRoomButRefused) {
  OomDetails d = gpu_numbers();
  d.policy = "preallocate";
  d.device_total_bytes = 0;
  d.device_refused = true;
  set_usage(d, 2 * kGiB, 2 * kGiB, 0);
  const OomDetails explained = explain_oom(d);
  EXPECT_EQ(explained.cause, OomCause::device_taken);
  EXPECT_THAT(explained.suggestion, StartsWith("cuda:0 refused to map 1.00 GiB although it reported 40.00 GiB free"));
  EXPECT_THAT(explained.suggestion, HasSubstr("other processes (or other devices of this process on the same "
                                              "hardware) hold the rest: stop them"));
  EXPECT_THAT(explained.suggestion, Not(HasSubstr("set growth to preallocate")));
}

TEST(ExplainOom, FragmentedNamesTheFreeBytesTheLargestBlockAndTheFixes) {
  OomDetails d = gpu_numbers();
  set_usage(d, 5 * kGiB, 8 * kGiB, 512 * kMiB);
  const OomDetails explained = explain_oom(d);
  EXPECT_EQ(explained.cause, OomCause::fragmented);
  EXPECT_EQ(explained.suggestion,
            "3.00 GiB is free in reserved memory but the largest free block is 512.00 MiB, smaller than the 1.00 GiB "
            "requested; the free bytes share granules with live allocations, so they cannot be given back: allocate "
            "large, long-lived buffers first so short-lived ones do not split the space between them, or raise "
            "memory_limit to >= 9.00 GiB to leave room for a fresh range");
}

TEST(ExplainOom, RoomUnderTheLimitIsNotADeviceRefusal) {
  // The numbers of the 187 MiB ResNet-18 trace at 1.03 x: 190 MiB mapped + 2.25 MiB fits the 192.77 MiB
  // limit byte for byte, but no placement of 2.25 MiB needed fewer than two new 2 MiB granules, which would
  // pass it. The device refused nothing: the free bytes are in pieces.
  OomDetails d = gpu_numbers();
  d.rounded_bytes = 2304 * kMiB / 1024;
  d.limit_bytes = 202131456;  // ceil(1.03 * 196247552)
  d.granule_bytes = 2 * kMiB;
  set_usage(d, 192612352, 190 * kMiB, 1536 * kMiB / 1024);
  const OomDetails explained = explain_oom(d);
  EXPECT_EQ(explained.cause, OomCause::fragmented);
  EXPECT_THAT(explained.suggestion, HasSubstr("raise memory_limit to >= 194.00 MiB")) << "190 MiB + two granules";
}

TEST(ExplainOom, ALimitUnderOneGranuleIsTheLimitNotTheCache) {
  // 100 KiB fits a 1 MiB limit byte for byte, but the device maps 2 MiB granules: the limit maps nothing, so no
  // cache (none is held) could ever make room.
  OomDetails d = gpu_numbers();
  d.requested_bytes = 100 * 1024;
  d.rounded_bytes = 100 * 1024;
  d.limit_bytes = 1 * kMiB;
  d.granule_bytes = 2 * kMiB;
  d.top_tags.clear();
  set_usage(d, 0, 0, 0);
  const OomDetails explained = explain_oom(d);
  EXPECT_EQ(explained.cause, OomCause::limit_too_low);
  EXPECT_EQ(explained.suggestion,
            "needs at least 1.00 MiB more: raise memory_limit to >= 2.00 MiB (the device maps whole granules of "
            "2.00 MiB) (or memory_fraction >= 0.01), or reduce the batch size");
}

TEST(ExplainOom, TheLiveDataInWholeGranulesOverTheLimitsGranulesIsTheLimit) {
  // 4.5 MiB live + 1 MiB = 5.5 MiB: three 2 MiB granules at the least. A 7 MiB or 6.5 MiB limit maps three (the
  // cause is elsewhere); a 5.75 MiB limit holds the bytes but maps only two granules.
  OomDetails d = gpu_numbers();
  d.granule_bytes = 2 * kMiB;
  d.rounded_bytes = 1 * kMiB;
  set_usage(d, 4 * kMiB + kMiB / 2, 6 * kMiB, 512 * 1024);
  d.limit_bytes = 7 * kMiB;
  EXPECT_NE(explain_oom(d).cause, OomCause::limit_too_low) << "three granules fit a 7 MiB limit";
  d.limit_bytes = 6 * kMiB + kMiB / 2;
  EXPECT_NE(explain_oom(d).cause, OomCause::limit_too_low) << "6.5 MiB still maps three granules";
  d.limit_bytes = 5 * kMiB + 3 * kMiB / 4;
  const OomDetails explained = explain_oom(d);
  EXPECT_EQ(explained.cause, OomCause::limit_too_low) << "5.75 MiB maps two granules; 5.5 MiB needs three";
  EXPECT_THAT(explained.suggestion, HasSubstr("needs at least 256.00 KiB more: raise memory_limit to >= 6.00 MiB "
                                              "(the device maps whole granules of 2.00 MiB)"));
}

TEST(ExplainOom, FragmentedWhilePreallocatedPointsAtAllocationOrder) {
  OomDetails d = gpu_numbers();
  d.policy = "preallocate";
  set_usage(d, 5 * kGiB, 8 * kGiB, 512 * kMiB);
  const OomDetails explained = explain_oom(d);
  EXPECT_EQ(explained.cause, OomCause::fragmented);
  EXPECT_THAT(explained.suggestion, HasSubstr("3.00 GiB is free in reserved memory but the largest free block is "
                                              "512.00 MiB"));
  EXPECT_THAT(explained.suggestion, HasSubstr("allocate large, long-lived buffers first"));
  EXPECT_THAT(explained.suggestion, HasSubstr("set growth to on_demand"));
  EXPECT_THAT(explained.suggestion, Not(HasSubstr("trim()")));
}

TEST(ExplainOom, HeldInCacheNamesWhatMustBeReleasedAndAThreshold) {
  OomDetails d = gpu_numbers();
  // 6.5 GiB live + 1 GiB fits the 8 GiB limit, but 7.25 GiB is mapped: 256 MiB of cache stands in the way.
  set_usage(d, 6656 * kMiB, 7424 * kMiB, 512 * kMiB);
  const OomDetails explained = explain_oom(d);
  EXPECT_EQ(explained.cause, OomCause::held_in_cache);
  EXPECT_EQ(explained.suggestion,
            "768.00 MiB of free memory is still mapped and 256.00 MiB of it had to be given back to fit 1.00 GiB under "
            "the limit 8.00 GiB: call trim() before large allocations, or set release_threshold to <= 512.00 MiB so "
            "the cache never grows that large");
}

TEST(ExplainOom, TheLimitCheckComesBeforeFragmentation) {
  OomDetails d = gpu_numbers();
  // Fragmented too (3 GiB free, no 1 GiB block), but 7.5 GiB live + 1 GiB is over the limit regardless.
  set_usage(d, 7680 * kMiB, 8 * kGiB + 3 * kGiB, 512 * kMiB);
  EXPECT_EQ(explain_oom(d).cause, OomCause::limit_too_low);
}

TEST(ExplainOom, InconsistentNumbersDoNotWrapAround) {
  OomDetails d;
  d.rounded_bytes = std::numeric_limits<std::uint64_t>::max();
  d.in_use_bytes = std::numeric_limits<std::uint64_t>::max();
  d.limit_bytes = 1;
  d.device_total_bytes = 1;
  const OomDetails explained = explain_oom(d);
  EXPECT_EQ(explained.cause, OomCause::limit_too_low);
  EXPECT_THAT(explained.suggestion, HasSubstr("more than the device's 1 B"));

  OomDetails zero;
  zero.reserved_bytes = 5;  // reserved below in use is impossible, but must not read as a huge number
  zero.in_use_bytes = 10;
  zero.limit_bytes = 100;
  zero.rounded_bytes = 50;
  zero.device_refused = true;
  const OomDetails refused = explain_oom(zero);
  EXPECT_EQ(refused.cause, OomCause::device_taken);
  EXPECT_THAT(refused.suggestion, Not(HasSubstr("EiB")));
}

TEST(FormatOom, GoldenReport) {
  OomDetails d = gpu_numbers();
  d.requested_bytes = 3 * kGiB - 100;
  d.rounded_bytes = 3 * kGiB;
  d.device_free_bytes = 10 * kGiB;
  set_usage(d, 6 * kGiB, 7 * kGiB, 512 * kMiB);
  const OomDetails explained = explain_oom(d);
  EXPECT_EQ(format_oom(explained),
            "plimsoll: out of memory on cuda:0 allocating 3.00 GiB (rounded to 3.00 GiB) for tag \"activations\"\n"
            "  policy:             on_demand\n"
            "  limit:              8.00 GiB\n"
            "  in use:             6.00 GiB\n"
            "  reserved:           7.00 GiB\n"
            "  largest free block: 512.00 MiB\n"
            "  fragmented:         1.00 GiB (free in reserved memory that cannot serve this request)\n"
            "  device free:        10.00 GiB of 80.00 GiB\n"
            "  top tags:           \"weights\" 4.00 GiB in 120 allocations (peak 4.00 GiB)\n"
            "                      \"activations\" 2.00 GiB in 33 allocations (peak 2.00 GiB)\n"
            "  cause:              limit_too_low (live allocations plus this request exceed the limit)\n"
            "  suggestion: needs at least 1.00 GiB more: raise memory_limit to >= 9.00 GiB (or memory_fraction >= "
            "0.12), or reduce the batch size; the largest tag is \"weights\" with 4.00 GiB");
}

TEST(FormatOom, ShowsAtMostFiveTagsAndNoneWhenEmpty) {
  OomDetails d = gpu_numbers();
  set_usage(d, 6 * kGiB, 6 * kGiB, 0);
  d.top_tags.clear();
  EXPECT_THAT(format_oom(explain_oom(d)), HasSubstr("  top tags:           none\n"));
  for (int i = 0; i < 7; ++i) d.top_tags.push_back(tag("t" + std::to_string(i), kMiB, 1));
  const std::string report = format_oom(explain_oom(d));
  EXPECT_THAT(report, HasSubstr("\"t4\" 1.00 MiB in 1 allocation (peak 1.00 MiB)"));
  EXPECT_THAT(report, Not(HasSubstr("\"t5\"")));
}

TEST(FormatOom, NothingIsFragmentedWhenTheLargestBlockWouldServe) {
  OomDetails d = gpu_numbers();
  set_usage(d, 1 * kGiB, 3 * kGiB, 2 * kGiB);
  EXPECT_THAT(format_oom(d), HasSubstr("  fragmented:         0 B (free in reserved memory"));
}

TEST(OutOfMemory, WhatIsTheReportAndDetailsAreKept) {
  OomDetails d = gpu_numbers();
  set_usage(d, 7680 * kMiB, 8 * kGiB, 0);
  const OomDetails explained = explain_oom(d);
  const OutOfMemory error(explained);
  EXPECT_EQ(std::string(error.what()), format_oom(explained));
  EXPECT_EQ(error.details().cause, OomCause::limit_too_low);
  EXPECT_EQ(error.details().suggestion, explained.suggestion);
  EXPECT_EQ(error.details().top_tags.size(), 2u);
  const Error& as_base = error;  // catchable as any plimsoll error
  EXPECT_THAT(as_base.what(), StartsWith("plimsoll: out of memory on cuda:0 allocating 1.00 GiB"));
}

}  // namespace
}  // namespace plimsoll
