// The trace parser: the format of ../shared/traces, its error messages (with line numbers and a fix), step
// markers, the live-bytes peak, and the real traces.
#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "plimsoll/error.hpp"
#include "plimsoll/trace.hpp"
#include "telemetry/traces/trace_totals.hpp"

namespace plimsoll {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using Kind = TraceEvent::Kind;

// The message of the InvalidArgument that parsing `text` throws; fails the test when it parses.
std::string parse_error(std::string_view text) {
  try {
    parse_trace(text, "t.trace");
  } catch (const InvalidArgument& error) {
    return error.what();
  }
  ADD_FAILURE() << "parsed without error:\n" << text;
  return {};
}

TEST(ParserTrace, ReadsEventsIntoDenseSlots) {
  const Trace trace = parse_trace("a 1 100\na 2 50\nf 1\na 3 7\nf 3\nf 2\n", "small");
  EXPECT_EQ(trace.origin, "small");
  ASSERT_EQ(trace.events.size(), 6u);
  EXPECT_EQ(trace.slots, 3u);
  EXPECT_EQ(trace.allocations, 3u);
  EXPECT_EQ(trace.frees, 3u);

  EXPECT_EQ(trace.events[0].kind, Kind::allocate);
  EXPECT_EQ(trace.events[0].slot, 0u);
  EXPECT_EQ(trace.events[0].bytes, 100u);
  EXPECT_EQ(trace.events[0].line, 1u);
  EXPECT_EQ(trace.events[2].kind, Kind::free);
  EXPECT_EQ(trace.events[2].slot, 0u);
  EXPECT_EQ(trace.events[2].line, 3u);
  EXPECT_EQ(trace.events[3].slot, 2u);
  EXPECT_EQ(trace.events[3].bytes, 7u);
  EXPECT_EQ(trace.events[5].slot, 1u);
}

TEST(ParserTrace, SlotsFollowAllocationOrderWhateverTheIds) {
  const Trace trace = parse_trace("a 18446744073709551615 1\na 5 2\na 1000000 3\nf 5\nf 1000000\n"
                                  "f 18446744073709551615\n",
                                  "ids");
  EXPECT_EQ(trace.slots, 3u);
  EXPECT_EQ(trace.events[3].slot, 1u);
  EXPECT_EQ(trace.events[4].slot, 2u);
  EXPECT_EQ(trace.events[5].slot, 0u);
}

TEST(ParserTrace, PeakLiveBytesIsTheLargestSumOfLiveRequests) {
  // Live: 100, 150, 50, 250 (peak), 50, 0.
  const Trace trace = parse_trace("a 1 100\na 2 50\nf 1\na 3 200\nf 3\nf 2\n", "peak");
  EXPECT_EQ(trace.peak_live_bytes, 250u);
}

// The readers and repeat_last_step count totals through one helper (telemetry/traces/trace_totals.hpp): recounting
// a parsed trace from its events gives what the reader counted as it parsed.
TEST(ParserTrace, RecountedTotalsAreTheReadersTotals) {
  const Trace parsed = parse_trace("a 1 100\na 2 50\n# step 1 begin\nf 1\na 3 200\na 4 0\nf 3\n# step 1 end\nf 2\n",
                                   "totals");
  Trace recounted = parsed;
  recounted.allocations = 7;
  recounted.frees = 7;
  recounted.peak_live_bytes = 7;
  telemetry::recount_totals(recounted);
  EXPECT_EQ(recounted.allocations, 4u);
  EXPECT_EQ(recounted.frees, 3u);
  EXPECT_EQ(recounted.peak_live_bytes, 250u);
  EXPECT_EQ(recounted.allocations, parsed.allocations);
  EXPECT_EQ(recounted.frees, parsed.frees);
  EXPECT_EQ(recounted.peak_live_bytes, parsed.peak_live_bytes);
  telemetry::TraceTotals totals;
  EXPECT_TRUE(totals.fits(~std::uint64_t{0}));
  Trace counted;
  totals.allocated(counted, ~std::uint64_t{0} - 1);
  EXPECT_TRUE(totals.fits(1));
  EXPECT_FALSE(totals.fits(2)) << "a reader refuses an allocation past 2^64 live bytes";
}

TEST(ParserTrace, ZeroByteAllocationsAreEvents) {
  const Trace trace = parse_trace("a 1 0\nf 1\n", "zero");
  ASSERT_EQ(trace.events.size(), 2u);
  EXPECT_EQ(trace.events[0].bytes, 0u);
  EXPECT_EQ(trace.peak_live_bytes, 0u);
}

TEST(ParserTrace, BlankLinesCrlfAndMissingFinalNewlineAreAccepted) {
  const Trace trace = parse_trace("a 1 10\r\n\r\n   \n\t\na  2\t20  \r\nf 1\r\nf 2", "crlf");
  ASSERT_EQ(trace.events.size(), 4u);
  EXPECT_EQ(trace.events[1].line, 5u);
  EXPECT_EQ(trace.events[1].bytes, 20u);
  EXPECT_EQ(trace.events[3].line, 7u);
  EXPECT_EQ(trace.peak_live_bytes, 30u);
}

TEST(ParserTrace, EmptyTextIsAnEmptyTrace) {
  const Trace trace = parse_trace("", "empty");
  EXPECT_TRUE(trace.events.empty());
  EXPECT_EQ(trace.slots, 0u);
  EXPECT_EQ(trace.peak_live_bytes, 0u);
}

TEST(ParserTrace, MarkersKeepTheirTextAndIndex) {
  const Trace trace = parse_trace("# model x batch 2\na 1 4\n#bare\nf 1\n#   \n", "markers");
  ASSERT_EQ(trace.markers.size(), 3u);
  EXPECT_EQ(trace.markers[0], "model x batch 2");
  EXPECT_EQ(trace.markers[1], "bare");
  EXPECT_EQ(trace.markers[2], "");
  ASSERT_EQ(trace.events.size(), 5u);
  EXPECT_EQ(trace.events[2].kind, Kind::marker);
  EXPECT_EQ(trace.events[2].slot, 1u);
  EXPECT_EQ(trace.events[2].line, 3u);
}

TEST(ParserTrace, StepsSpanTheEventsBetweenTheirMarkers) {
  const Trace trace = parse_trace(
      "a 1 8\n"           // 0
      "# step 0 begin\n"  // 1
      "a 2 8\n"           // 2
      "f 2\n"             // 3
      "# step 0 end\n"    // 4
      "# step 7 begin\n"  // 5
      "# step 7 end\n"    // 6
      "f 1\n",
      "steps");
  ASSERT_EQ(trace.steps.size(), 2u);
  EXPECT_EQ(trace.steps[0].number, 0);
  EXPECT_EQ(trace.steps[0].begin, 2u);
  EXPECT_EQ(trace.steps[0].end, 4u);
  EXPECT_EQ(trace.steps[1].number, 7);
  EXPECT_EQ(trace.steps[1].begin, 6u);
  EXPECT_EQ(trace.steps[1].end, 6u);
  EXPECT_EQ(trace.events[trace.steps[0].end].kind, Kind::marker);
}

TEST(ParserTrace, OtherMarkersStartingWithStepAreNotes) {
  const Trace trace = parse_trace("# step 3 of warmup\n# stepping\n# step 1 begin now\n", "notes");
  EXPECT_TRUE(trace.steps.empty());
  EXPECT_EQ(trace.markers.size(), 3u);
}

TEST(ParserTraceErrors, UnknownEventLetter) {
  const std::string message = parse_error("a 1 4\nx 1 4\n");
  EXPECT_THAT(message, StartsWith("t.trace:2: "));
  EXPECT_THAT(message, HasSubstr("unknown event 'x'"));
  EXPECT_THAT(message, HasSubstr("'a <id> <bytes>'"));
}

TEST(ParserTraceErrors, MissingFields) {
  EXPECT_THAT(parse_error("a 1\n"), StartsWith("t.trace:1: missing byte count"));
  EXPECT_THAT(parse_error("\na\n"), StartsWith("t.trace:2: missing id; write the line as 'a <id> <bytes>'"));
  EXPECT_THAT(parse_error("a 1 2\n\n\nf\n"), StartsWith("t.trace:4: missing id; write the line as 'f <id>'"));
}

TEST(ParserTraceErrors, ExtraFields) {
  EXPECT_THAT(parse_error("a 1 2 3\n"), StartsWith("t.trace:1: extra field '3'; write the line as 'a <id> <bytes>'"));
  EXPECT_THAT(parse_error("a 1 2\nf 1 2\n"), StartsWith("t.trace:2: extra field '2'; write the line as 'f <id>'"));
}

TEST(ParserTraceErrors, NonNumericIdsAndBytes) {
  EXPECT_THAT(parse_error("a x1 5\n"), StartsWith("t.trace:1: id 'x1' is not a number"));
  EXPECT_THAT(parse_error("a 1x 5\n"), StartsWith("t.trace:1: id '1x' is not a number"));
  EXPECT_THAT(parse_error("a 1 12k\n"), StartsWith("t.trace:1: byte count '12k' is not a number"));
  EXPECT_THAT(parse_error("a 1 1.5\n"), StartsWith("t.trace:1: byte count '1.5' is not a number"));
  EXPECT_THAT(parse_error("a 1 5\nf one\n"), StartsWith("t.trace:2: id 'one' is not a number"));
  EXPECT_THAT(parse_error("a 1 99999999999999999999\n"), StartsWith("t.trace:1: byte count '99999999999999999999' "
                                                                     "is too large"));
  EXPECT_THAT(parse_error("a 18446744073709551616 1\n"), StartsWith("t.trace:1: id '18446744073709551616' is too "
                                                                     "large"));
}

TEST(ParserTraceErrors, ZeroAndNegativeIds) {
  EXPECT_THAT(parse_error("a 0 5\n"), StartsWith("t.trace:1: id 0 is not allowed; ids are positive integers"));
  EXPECT_THAT(parse_error("a 1 1\na -3 5\n"), StartsWith("t.trace:2: id '-3' is negative"));
  EXPECT_THAT(parse_error("f -1\n"), StartsWith("t.trace:1: id '-1' is negative"));
  EXPECT_THAT(parse_error("a 3 -5\n"), StartsWith("t.trace:1: byte count '-5' is negative"));
}

TEST(ParserTraceErrors, RepeatedIdNamesTheFirstAllocation) {
  EXPECT_THAT(parse_error("a 17 8\na 2 8\na 17 8\n"),
              StartsWith("t.trace:3: id 17 was already allocated at line 1; give every allocation its own id"));
  // Ids are unique within a file even after their free.
  EXPECT_THAT(parse_error("a 17 8\nf 17\n\na 17 8\n"), StartsWith("t.trace:4: id 17 was already allocated at line 1"));
  // Ids beyond the dense range go through the hash map and get the same check.
  EXPECT_THAT(parse_error("a 9000000000 8\na 9000000000 8\n"),
              StartsWith("t.trace:2: id 9000000000 was already allocated at line 1"));
}

TEST(ParserTraceErrors, FreeOfUnknownId) {
  EXPECT_THAT(parse_error("a 1 8\nf 2\n"), StartsWith("t.trace:2: free of id 2, which was never allocated; every "
                                                      "'f 2' must follow its 'a 2 <bytes>'"));
  EXPECT_THAT(parse_error("f 123456789012\n"), StartsWith("t.trace:1: free of id 123456789012, which was never"));
}

TEST(ParserTraceErrors, DoubleFreeNamesTheFirstFree) {
  EXPECT_THAT(parse_error("a 17 8\na 3 1\nf 17\nf 3\nf 17\n"),
              StartsWith("t.trace:5: id 17 was already freed at line 3; free each allocation once"));
}

TEST(ParserTraceErrors, StepMarkersMustPair) {
  EXPECT_THAT(parse_error("# step 0 end\n"), StartsWith("t.trace:1: 'step 0 end' without a matching 'step 0 "
                                                        "begin'"));
  EXPECT_THAT(parse_error("# step 0 begin\n# step 1 begin\n"),
              StartsWith("t.trace:2: step 1 begins while step 0 (begun at line 1) is still open; add 'step 0 "
                         "end'"));
  EXPECT_THAT(parse_error("# step 0 begin\na 1 1\n# step 1 end\n"),
              StartsWith("t.trace:3: 'step 1 end' closes step 0 (begun at line 1)"));
  EXPECT_THAT(parse_error("a 1 1\n# step 4 begin\nf 1\n"),
              StartsWith("t.trace:2: step 4 begins here but never ends; add 'step 4 end'"));
  EXPECT_THAT(parse_error("# step x begin\n"), StartsWith("t.trace:1: step number 'x' is not an integer"));
}

TEST(ParserTraceErrors, LineNumbersCountBlankAndCrlfLines) {
  EXPECT_THAT(parse_error("a 1 1\r\n\r\n\r\nq\r\n"), StartsWith("t.trace:4: unknown event 'q'"));
}

TEST(ParserTraceErrors, LongTokensAreCutInMessages) {
  const std::string message = parse_error("a " + std::string(5000, '7') + "x 1\n");
  EXPECT_THAT(message, HasSubstr("...'"));
  EXPECT_LT(message.size(), 300u);
}

TEST(ReadTrace, MissingFileNamesThePath) {
  try {
    read_trace("/nonexistent/dir/missing.trace");
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& error) {
    EXPECT_THAT(error.what(), StartsWith("/nonexistent/dir/missing.trace: cannot open the trace"));
    EXPECT_THAT(error.what(), HasSubstr("check the path"));
  }
}

TEST(ReadTrace, ErrorsNameTheFile) {
  const std::string path = ::testing::TempDir() + "parser_trace_bad.trace";
  std::ofstream(path) << "a 1 1\na 1 1\n";
  try {
    read_trace(path);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& error) {
    EXPECT_THAT(error.what(), StartsWith(path + ":2: id 1 was already allocated at line 1"));
  }
}

// The shared traces: every line is an event, every file ends with nothing live (README), and the peaks were
// computed independently with a script over the files.
struct SharedTrace {
  const char* file;
  std::size_t lines;
  std::size_t allocations;
  std::uint64_t peak_live_bytes;
};

class SharedTraces : public ::testing::TestWithParam<SharedTrace> {};

TEST_P(SharedTraces, LoadWithTheirCountsAndPeak) {
  const SharedTrace& expected = GetParam();
  const Trace trace = read_trace(std::string(PLIMSOLL_TRACES_DIR) + "/" + expected.file);
  EXPECT_EQ(trace.events.size(), expected.lines);
  EXPECT_EQ(trace.allocations, expected.allocations);
  EXPECT_EQ(trace.frees, expected.allocations);
  EXPECT_EQ(trace.slots, expected.allocations);
  EXPECT_EQ(trace.peak_live_bytes, expected.peak_live_bytes);
  EXPECT_GE(trace.steps.size(), 3u);
  EXPECT_EQ(trace.events.back().line, expected.lines);
}

INSTANTIATE_TEST_SUITE_P(
    Files, SharedTraces,
    ::testing::Values(SharedTrace{"resnet50-b32.trace", 88483, 44238, 3097720356},
                      SharedTrace{"vgg16-b16.trace", 22051, 11022, 3397769656},
                      SharedTrace{"mobilenet_v2-b64.trace", 87863, 43928, 5087610732},
                      SharedTrace{"gpt-6-512-b8.trace", 3963, 1978, 1280932064},
                      SharedTrace{"resnet18-b128-sgd.trace", 29319, 14656, 839327472},
                      SharedTrace{"leak-retained-batches-resnet18.trace", 114511, 57243, 217484496},
                      SharedTrace{"leak-clean-resnet18.trace", 114511, 57243, 196250832}));

TEST(SharedTraces, Resnet50HasThreeStepsAtTheirMarkers) {
  const Trace trace = read_trace(std::string(PLIMSOLL_TRACES_DIR) + "/resnet50-b32.trace");
  ASSERT_EQ(trace.steps.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(trace.steps[static_cast<std::size_t>(i)].number, i);
  // "# step 0 begin" is line 346 and "# step 0 end" line 30270.
  EXPECT_EQ(trace.events[trace.steps[0].begin - 1].line, 346u);
  EXPECT_EQ(trace.events[trace.steps[0].end].line, 30270u);
  EXPECT_EQ(trace.events[trace.steps[2].end].line, 87102u);
  EXPECT_THAT(trace.markers.front(), StartsWith("model resnet50 batch 32"));
}

TEST(SharedTraces, LeakingRunHasTwelveStepsAndAHigherPeak) {
  const Trace leaking = read_trace(std::string(PLIMSOLL_TRACES_DIR) + "/leak-retained-batches-resnet18.trace");
  const Trace clean = read_trace(std::string(PLIMSOLL_TRACES_DIR) + "/leak-clean-resnet18.trace");
  EXPECT_EQ(leaking.steps.size(), 12u);
  EXPECT_EQ(clean.steps.size(), 12u);
  EXPECT_GT(leaking.peak_live_bytes, clean.peak_live_bytes);
}

}  // namespace
}  // namespace plimsoll
