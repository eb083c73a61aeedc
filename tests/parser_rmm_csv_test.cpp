// RMM's logging CSV: columns into the Trace model (threads, times, streams, pointer reuse, failed allocations),
// every error with its line and fix, and a generated log of a million lines.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <cstdint>
#include <string>
#include <string_view>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "plimsoll/error.hpp"
#include "plimsoll/trace.hpp"
#include "telemetry/traces/trace_readers.hpp"

namespace plimsoll::telemetry {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using Kind = TraceEvent::Kind;

constexpr std::string_view kHeader = "Thread,Time,Action,Pointer,Size,Stream\n";

std::string log_of(std::string_view lines) { return std::string(kHeader) + std::string(lines); }

// The message of the InvalidArgument that parsing `text` throws; fails the test when it parses.
std::string parse_error(std::string_view text) {
  try {
    parse_rmm_csv(text, "rmm.csv");
  } catch (const InvalidArgument& error) {
    return error.what();
  }
  ADD_FAILURE() << "parsed without error:\n" << text;
  return {};
}

TEST(ParserRmmCsv, ReadsEveryColumn) {
  const Trace trace = parse_rmm_csv(log_of("140573312345856,14:02:11.123456,allocate,0x7f8a40000000,1024,0x7f8a38001020\n"
                                           "140573312345856,14:02:11.123500,allocate,0x7f8a40000400,2048,0x0\n"
                                           "99,14:02:11.124456,free,0x7f8a40000000,1024,0x7f8a38001020\n"
                                           "99,14:02:12.5,allocate failure,0x0,1099511627776,0x0\n"),
                                    "small.csv");
  EXPECT_EQ(trace.origin, "small.csv");
  EXPECT_TRUE(trace.has_times);
  ASSERT_EQ(trace.events.size(), 4u);
  EXPECT_EQ(trace.allocations, 2u);
  EXPECT_EQ(trace.frees, 1u);
  EXPECT_EQ(trace.slots, 2u);
  EXPECT_EQ(trace.peak_live_bytes, 3072u);

  const TraceEvent& first = trace.events[0];
  EXPECT_EQ(first.kind, Kind::allocate);
  EXPECT_EQ(first.slot, 0u);
  EXPECT_EQ(first.bytes, 1024u);
  EXPECT_EQ(first.line, 2u);  // the header is line 1
  EXPECT_EQ(first.thread, 1u);
  EXPECT_EQ(first.time_ns, 0u);
  EXPECT_EQ(first.stream, 0x7f8a38001020u);

  EXPECT_EQ(trace.events[1].thread, 1u);
  EXPECT_EQ(trace.events[1].time_ns, 44'000u);
  EXPECT_EQ(trace.events[1].stream, 0u);

  const TraceEvent& free = trace.events[2];
  EXPECT_EQ(free.kind, Kind::free);
  EXPECT_EQ(free.slot, 0u);
  EXPECT_EQ(free.thread, 2u);
  EXPECT_EQ(free.time_ns, 1'000'000u);

  const TraceEvent& oom = trace.events[3];
  EXPECT_EQ(oom.kind, Kind::oom);
  EXPECT_EQ(oom.bytes, 1099511627776u);
  EXPECT_EQ(oom.time_ns, 1'376'544'000u);
  EXPECT_EQ(oom.line, 5u);
}

TEST(ParserRmmCsv, AFreedPointerIsANewSlotWhenAllocatedAgain) {
  const Trace trace = parse_rmm_csv(log_of("1,00:00:00.000001,allocate,0x1000,64,0x0\n"
                                           "1,00:00:00.000002,free,0x1000,64,0x0\n"
                                           "1,00:00:00.000003,allocate,0x1000,128,0x0\n"
                                           "1,00:00:00.000004,free,0x1000,128,0x0\n"),
                                    "reuse");
  EXPECT_EQ(trace.slots, 2u);
  EXPECT_EQ(trace.events[2].slot, 1u);
  EXPECT_EQ(trace.events[3].slot, 1u);
  EXPECT_EQ(trace.peak_live_bytes, 128u);
}

TEST(ParserRmmCsv, ReadsBareHexLaterRmmVersionsWrite) {
  const Trace trace = parse_rmm_csv(log_of("7,10:00:00.000000,allocate,7f8a40000000,256,7f8a38001020\n"
                                           "7,10:00:00.000001,free,0X7F8A40000000,256,0\n"),
                                    "bare");
  EXPECT_EQ(trace.events[0].stream, 0x7f8a38001020u);
  EXPECT_EQ(trace.events[1].slot, 0u);
  EXPECT_EQ(trace.frees, 1u);
}

TEST(ParserRmmCsv, EmptyAllocationsShareTheNullPointer) {
  const Trace trace = parse_rmm_csv(log_of("1,10:00:00.0,allocate,0x0,0,0x0\n"
                                           "1,10:00:00.0,allocate,0x0,0,0x0\n"
                                           "1,10:00:00.0,free,0x0,0,0x0\n"
                                           "1,10:00:00.0,free,0x0,0,0x0\n"),
                                    "empty");
  EXPECT_EQ(trace.allocations, 2u);
  EXPECT_EQ(trace.frees, 2u);
  EXPECT_EQ(trace.events[2].slot, 1u);
  EXPECT_EQ(trace.events[3].slot, 0u);
}

TEST(ParserRmmCsv, TimeRunsOnPastMidnight) {
  const Trace trace = parse_rmm_csv(log_of("1,23:59:59.500000,allocate,0x10,1,0x0\n"
                                           "1,00:00:00.250000,allocate,0x20,1,0x0\n"
                                           "1,23:59:59.900000,allocate,0x30,1,0x0\n"  // written late, before midnight
                                           "1,00:00:01.000000,free,0x10,1,0x0\n"),
                                    "midnight");
  EXPECT_EQ(trace.events[1].time_ns, 750'000'000u);
  EXPECT_EQ(trace.events[2].time_ns, 400'000'000u);
  EXPECT_EQ(trace.events[3].time_ns, 1'500'000'000u);
}

TEST(ParserRmmCsv, ReadsEpochSecondsAndClampsRacingLinesToZero) {
  const Trace trace = parse_rmm_csv(log_of("1,1634567890.123456,allocate,0x10,1,0x0\n"
                                           "2,1634567890.123400,allocate,0x20,1,0x0\n"
                                           "1,1634567892,free,0x10,1,0x0\n"),
                                    "epoch");
  EXPECT_EQ(trace.events[1].time_ns, 0u);
  EXPECT_EQ(trace.events[2].time_ns, 1'876'544'000u);
}

TEST(ParserRmmCsv, HeaderOnlyLogIsAnEmptyTraceAndBlankLinesAndCrlfAreFine) {
  EXPECT_TRUE(parse_rmm_csv(kHeader, "h").events.empty());
  const Trace trace = parse_rmm_csv("Thread,Time,Action,Pointer,Size,Stream\r\n\r\n"
                                    "1,10:00:00.000000,allocate,0x10,8,0x0\r\n\n",
                                    "crlf");
  ASSERT_EQ(trace.events.size(), 1u);
  EXPECT_EQ(trace.events[0].line, 3u);
}

TEST(ParserRmmCsv, TellsItsHeaderApart) {
  EXPECT_TRUE(has_rmm_csv_header(kHeader));
  EXPECT_TRUE(has_rmm_csv_header("Thread,Time,Action,Pointer,Size,Stream"));
  EXPECT_TRUE(has_rmm_csv_header("Thread,Time,Action,Pointer,Size,Stream\r\n1,..."));
  EXPECT_FALSE(has_rmm_csv_header("Thread,Time,Action,Pointer,Size,Stream,Extra\n"));
  EXPECT_FALSE(has_rmm_csv_header("a 1 100\n"));
  EXPECT_FALSE(has_rmm_csv_header(""));
}

TEST(ParserRmmCsv, RejectsAWrongHeader) {
  EXPECT_THAT(parse_error("Thread,Time,Action,Pointer,Size\n"),
              AllOf(StartsWith("rmm.csv:1: not an RMM log"), HasSubstr("'Thread,Time,Action,Pointer,Size'"),
                    HasSubstr("RMM_LOG_FILE")));
  EXPECT_THAT(parse_error(""), StartsWith("rmm.csv:1: not an RMM log: the first line is ''"));
}

TEST(ParserRmmCsv, RejectsAWrongFieldCount) {
  EXPECT_THAT(parse_error(log_of("1,10:00:00.0,allocate,0x10,8\n")),
              AllOf(StartsWith("rmm.csv:2: 5 comma-separated fields where RMM writes 6"), HasSubstr("remove or repair")));
  EXPECT_THAT(parse_error(log_of("1,10:00:00.0,allocate,0x10,8,0x0,extra\n")),
              StartsWith("rmm.csv:2: 7 comma-separated fields"));
}

TEST(ParserRmmCsv, RejectsAnUnknownAction) {
  EXPECT_THAT(parse_error(log_of("1,10:00:00.0,allocate,0x10,8,0x0\n1,10:00:00.0,deallocate,0x10,8,0x0\n")),
              AllOf(StartsWith("rmm.csv:3: unknown action 'deallocate'"),
                    HasSubstr("'allocate', 'free' and 'allocate failure'")));
}

TEST(ParserRmmCsv, RejectsBadNumbers) {
  EXPECT_THAT(parse_error(log_of("main,10:00:00.0,allocate,0x10,8,0x0\n")),
              StartsWith("rmm.csv:2: thread id 'main' is not a number"));
  EXPECT_THAT(parse_error(log_of("99999999999999999999,10:00:00.0,allocate,0x10,8,0x0\n")),
              StartsWith("rmm.csv:2: thread id '99999999999999999999' is too large"));
  EXPECT_THAT(parse_error(log_of("1,10:00:00.0,allocate,0x10,-8,0x0\n")),
              StartsWith("rmm.csv:2: size '-8' is not a number"));
  EXPECT_THAT(parse_error(log_of("1,10:00:00.0,allocate,0x10,8KiB,0x0\n")),
              AllOf(StartsWith("rmm.csv:2: size '8KiB' is not a number"), HasSubstr("decimal integer")));
  EXPECT_THAT(parse_error(log_of("1,10:00:00.0,allocate,0x10,18446744073709551616,0x0\n")),
              StartsWith("rmm.csv:2: size '18446744073709551616' is too large"));
  EXPECT_THAT(parse_error(log_of("1,10:00:00.0,allocate,0xzz,8,0x0\n")),
              AllOf(StartsWith("rmm.csv:2: pointer '0xzz' is not a hexadecimal number"), HasSubstr("0x7f3a40000000")));
  EXPECT_THAT(parse_error(log_of("1,10:00:00.0,allocate,0x,8,0x0\n")),
              StartsWith("rmm.csv:2: pointer '0x' is not a hexadecimal number"));
  EXPECT_THAT(parse_error(log_of("1,10:00:00.0,allocate,0x10000000000000000,8,0x0\n")),
              StartsWith("rmm.csv:2: pointer '0x10000000000000000' is too large"));
  EXPECT_THAT(parse_error(log_of("1,10:00:00.0,allocate,0x10,8,stream0\n")),
              StartsWith("rmm.csv:2: stream 'stream0' is not a hexadecimal number"));
}

TEST(ParserRmmCsv, RejectsBadTimes) {
  for (const std::string_view time : {"24:00:00.0", "10:60:00.0", "10:00:61.0", "10:00", "10:00:00.", "10:00:00.1234567890",
                                      "ten", "10:00:00.12a", "-5"}) {
    EXPECT_THAT(parse_error(log_of(fmt::format("1,{},allocate,0x10,8,0x0\n", time))),
                AllOf(StartsWith(fmt::format("rmm.csv:2: time '{}' is not a time", time)), HasSubstr("HH:MM:SS.ffffff")))
        << time;
  }
  EXPECT_THAT(parse_error(log_of("1,10:00:00.0,allocate,0x10,8,0x0\n1,1634567890.5,free,0x10,8,0x0\n")),
              AllOf(StartsWith("rmm.csv:3: time '1634567890.5' is written differently from the earlier lines "
                               "(HH:MM:SS.ffffff)"),
                    HasSubstr("same time format")));
}

TEST(ParserRmmCsv, RejectsFreesOfPointersThatAreNotLive) {
  EXPECT_THAT(parse_error(log_of("1,10:00:00.0,free,0x10,8,0x0\n")),
              AllOf(StartsWith("rmm.csv:2: free of pointer 0x10, which was never allocated"), HasSubstr("whole log")));
  EXPECT_THAT(parse_error(log_of("1,10:00:00.0,allocate,0x10,8,0x0\n1,10:00:00.0,free,0x10,8,0x0\n"
                                 "1,10:00:00.0,free,0x10,8,0x0\n")),
              StartsWith("rmm.csv:4: free of pointer 0x10, which was already freed at line 3 (allocated at line 2)"));
  EXPECT_THAT(parse_error(log_of("1,10:00:00.0,free,0x0,0,0x0\n")),
              StartsWith("rmm.csv:2: free of pointer 0x0 with no empty allocation live"));
}

TEST(ParserRmmCsv, RejectsAllocationsOfLivePointersAndDamagedLines) {
  EXPECT_THAT(parse_error(log_of("1,10:00:00.0,allocate,0x10,8,0x0\n1,10:00:00.0,allocate,0x10,8,0x0\n")),
              AllOf(StartsWith("rmm.csv:3: pointer 0x10 is allocated again while still live (allocated at line 2"),
                    HasSubstr("RMM_LOG_FILE")));
  EXPECT_THAT(parse_error(log_of("1,10:00:00.0,allocate,0x0,8,0x0\n")),
              StartsWith("rmm.csv:2: allocate of 8 bytes at pointer 0"));
  EXPECT_THAT(parse_error(log_of("1,10:00:00.0,allocate,0x10,8,0x0\n1,10:00:00.0,free,0x10,16,0x0\n")),
              AllOf(StartsWith("rmm.csv:3: free of 0x10 with size 16, but it was allocated with size 8 at line 2"),
                    HasSubstr("one complete log")));
  EXPECT_THAT(parse_error(log_of("1,10:00:00.0,allocate,0x10,18446744073709551615,0x0\n"
                                 "1,10:00:00.0,allocate,0x20,1,0x0\n")),
              StartsWith("rmm.csv:3: the live bytes pass 2^64"));
}

TEST(ParserRmmCsv, ReadTraceTellsAnRmmLogByItsHeader) {
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("plimsoll-rmm-" + std::to_string(::getpid()) + ".csv");
  std::ofstream(path) << log_of("1,10:00:00.000000,allocate,0x1000,256,0x0\n"
                                "1,10:00:00.000001,free,0x1000,256,0x0\n");
  const Trace trace = read_trace(path.string());
  std::filesystem::remove(path);
  EXPECT_EQ(trace.events.size(), 2u);
  EXPECT_EQ(trace.peak_live_bytes, 256u);
  EXPECT_TRUE(trace.has_times);
}

// A log of a million lines, written the way RMM writes one: 64 threads' worth of rotating addresses, so
// pointers are reused, and every allocation freed. (How fast it loads is measured in bench/, not here.)
TEST(ParserRmmCsv, LoadsAMillionLineLogWithReusedPointers) {
  constexpr int kAllocations = 500'000;
  constexpr int kLiveAtOnce = 1000;
  std::string text(kHeader);
  text.reserve(80u * 2u * kAllocations);
  std::uint64_t expected_peak = 0;
  std::uint64_t live = 0;
  for (int i = 0; i < kAllocations + kLiveAtOnce; ++i) {
    const int seconds = i / 1000;
    if (i >= kLiveAtOnce) {
      const int old = i - kLiveAtOnce;
      fmt::format_to(std::back_inserter(text), "{},{:02}:{:02}:{:02}.{:06},free,{:#x},{},0x0\n", 140000 + old % 64,
                     seconds / 3600, seconds / 60 % 60, seconds % 60, i % 1000 * 1000,
                     0x7f0000000000 + (old % (2 * kLiveAtOnce)) * 4096, 256 + old % 4096);
      live -= static_cast<std::uint64_t>(256 + old % 4096);
    }
    if (i < kAllocations) {
      fmt::format_to(std::back_inserter(text), "{},{:02}:{:02}:{:02}.{:06},allocate,{:#x},{},0x0\n",
                     140000 + i % 64, seconds / 3600, seconds / 60 % 60, seconds % 60, i % 1000 * 1000,
                     0x7f0000000000 + (i % (2 * kLiveAtOnce)) * 4096, 256 + i % 4096);
      live += static_cast<std::uint64_t>(256 + i % 4096);
      expected_peak = std::max(expected_peak, live);
    }
  }

  const Trace trace = parse_rmm_csv(text, "big.csv");

  EXPECT_EQ(trace.events.size(), 2u * kAllocations);
  EXPECT_EQ(trace.allocations, static_cast<std::size_t>(kAllocations));
  EXPECT_EQ(trace.frees, static_cast<std::size_t>(kAllocations));
  EXPECT_EQ(trace.peak_live_bytes, expected_peak);
  EXPECT_EQ(trace.events.back().thread, 32u);  // thread 140031: threads are numbered 1..64 as they appear
  EXPECT_EQ(trace.events.back().time_ns, 500'999'000'000u);
}

}  // namespace
}  // namespace plimsoll::telemetry
