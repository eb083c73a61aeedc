// Recording allocator events to plimsoll's trace format and reading them back: what is recorded, steps and
// markers, map/unmap accounting, OOMs, snapshots, a recording cut short, and every malformed-file error.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backings/sim_backing.hpp"
#include "cli_runner.hpp"
#include "plimsoll/allocator.hpp"
#include "plimsoll/error.hpp"
#include "plimsoll/recording.hpp"
#include "plimsoll/trace.hpp"
#include "telemetry/replay/replay.hpp"
#include "telemetry/traces/trace_binary.hpp"

// Stand for user code that allocates: the call sites a recording with call sites must name. Outside namespace
// plimsoll (whose frames are skipped as internal) and non-inline, so a Release build names them from the symbol
// table; each records a property after its call, so the call is not a tail call that would drop its frame.
[[gnu::noinline]] void* recording_test_user_allocates(plimsoll::Allocator& device, std::uint64_t bytes) {
  void* block = device.allocate(bytes, "activations");
  ::testing::Test::RecordProperty("allocated", 1);
  return block;
}

[[gnu::noinline]] void* recording_test_other_user_code(plimsoll::Allocator& device) {
  void* block = device.allocate(64);
  ::testing::Test::RecordProperty("allocated", 2);
  return block;
}

namespace plimsoll {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
namespace binary = telemetry::binary;
constexpr std::uint64_t MiB = 1ull << 20;
constexpr std::uint64_t GiB = 1ull << 30;

std::unique_ptr<Allocator> sim_device(std::string name, std::uint64_t limit = 1 * GiB) {
  DeviceDescription d;
  d.name = std::move(name);
  d.hardware = "simulated device";
  d.policy.growth = Growth::on_demand;
  d.limit_bytes = limit;
  d.total_bytes = 4 * GiB;
  return std::make_unique<Allocator>(d, std::make_unique<backings::SimBacking>(4 * GiB));
}

class Recorded : public ::testing::Test {
 protected:
  std::string path_ = (std::filesystem::temp_directory_path() /
                       ("plimsoll-recording-" + std::to_string(::getpid()) + "-" +
                        ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".plimsoll"))
                          .string();
  void TearDown() override { std::filesystem::remove(path_); }

  std::string file_bytes() const { return testing::read_text_file(path_); }
  void write_bytes(const std::string& bytes) const { std::ofstream(path_, std::ios::binary) << bytes; }
};

std::vector<TraceEvent::Kind> kinds(const Trace& trace) {
  std::vector<TraceEvent::Kind> out;
  for (const TraceEvent& event : trace.events) out.push_back(event.kind);
  return out;
}

TEST_F(Recorded, AllocationsFreesTagsAndTimesComeBack) {
  auto device = sim_device("sim:4GiB");
  auto recording = Recording::open(path_);
  device->record_to(recording);
  void* weights = device->allocate(3 * MiB, "weights");
  void* activations = device->allocate(1000, "activations");
  device->deallocate(activations);
  device->record_to(nullptr);
  device->deallocate(weights);  // after detaching: not recorded
  recording->close();

  Trace trace = read_trace(path_);
  EXPECT_EQ(recording->events(), trace.events.size());
  using Kind = TraceEvent::Kind;
  ASSERT_EQ(trace.events.front().kind, Kind::map);  // the heap maps before it can place the first block
  std::erase_if(trace.events, [](const TraceEvent& event) { return event.kind == Kind::map; });
  ASSERT_THAT(kinds(trace), ::testing::ElementsAre(Kind::allocate, Kind::allocate, Kind::free));
  EXPECT_EQ(trace.events[0].bytes, 3 * MiB);
  EXPECT_EQ(trace.tags[trace.events[0].tag], "weights");
  EXPECT_EQ(trace.tags[trace.events[1].tag], "activations");
  EXPECT_EQ(trace.events[1].bytes, 1000u);
  EXPECT_EQ(trace.events[2].slot, trace.events[1].slot);
  EXPECT_EQ(trace.devices[trace.events[0].device], "sim:4GiB");
  EXPECT_TRUE(trace.has_times);
  EXPECT_FALSE(trace.cut_short);
  for (std::size_t i = 1; i < trace.events.size(); ++i) EXPECT_LE(trace.events[i - 1].time_ns, trace.events[i].time_ns);
  EXPECT_NE(trace.events[0].thread, 0u);
  EXPECT_EQ(trace.peak_live_bytes, 3 * MiB + 1000);
}

TEST_F(Recorded, StepsAndMarkersBecomeTraceSteps) {
  auto device = sim_device("sim:4GiB");
  auto recording = Recording::open(path_);
  device->record_to(recording);
  recording->marker("model resnet");
  const int first = current_step() + 1;
  for (int i = 0; i < 3; ++i) {
    step();
    device->deallocate(device->allocate(4096));
  }
  recording->close();  // ends the open step

  const Trace trace = read_trace(path_);
  ASSERT_EQ(trace.steps.size(), 3u);
  EXPECT_EQ(trace.steps[0].number, first);
  EXPECT_EQ(trace.steps[2].number, first + 2);
  EXPECT_EQ(trace.markers.front(), "model resnet");
  for (const TraceStep& s : trace.steps) {
    // Each step holds its allocation and its free (and the first also the map).
    std::size_t allocations = 0;
    for (std::size_t i = s.begin; i < s.end; ++i) allocations += trace.events[i].kind == TraceEvent::Kind::allocate;
    EXPECT_EQ(allocations, 1u);
  }
}

TEST_F(Recorded, MapsMinusUnmapsIsWhatStaysReservedAndTrimIsRecorded) {
  auto device = sim_device("sim:4GiB");
  auto recording = Recording::open(path_);
  device->record_to(recording);
  std::vector<void*> blocks;
  for (int i = 0; i < 20; ++i) blocks.push_back(device->allocate(5 * MiB));
  for (void* block : blocks) device->deallocate(block);
  device->trim();
  const std::uint64_t reserved = device->stats().reserved_bytes;
  recording->close();

  const Trace trace = read_trace(path_);
  std::uint64_t mapped = 0, unmapped = 0;
  for (const TraceEvent& event : trace.events) {
    if (event.kind == TraceEvent::Kind::map) mapped += event.bytes;
    if (event.kind == TraceEvent::Kind::unmap) unmapped += event.bytes;
  }
  EXPECT_GT(unmapped, 0u);
  EXPECT_EQ(mapped - unmapped, reserved);
}

TEST_F(Recorded, OutOfMemoryIsAnEvent) {
  auto device = sim_device("sim:4GiB", 8 * MiB);
  auto recording = Recording::open(path_);
  device->record_to(recording);
  EXPECT_THROW(device->allocate(64 * MiB, "activations"), OutOfMemory);
  recording->close();
  const Trace trace = read_trace(path_);
  ASSERT_EQ(trace.events.back().kind, TraceEvent::Kind::oom);
  EXPECT_EQ(trace.events.back().bytes, 64 * MiB);
  EXPECT_EQ(trace.tags[trace.events.back().tag], "activations");
}

TEST_F(Recorded, TwoDevicesWithTheSameAddressesShareOneRecording) {
  // Simulated devices hand out the same synthetic addresses: ids are per device in the format.
  auto first = sim_device("sim:4GiB");
  auto second = sim_device("sim:4GiB/1");
  auto recording = Recording::open(path_);
  first->record_to(recording);
  second->record_to(recording);
  void* a = first->allocate(MiB);
  void* b = second->allocate(MiB);
  first->deallocate(a);
  second->deallocate(b);
  recording->close();
  const Trace trace = read_trace(path_);
  EXPECT_EQ(trace.allocations, 2u);
  EXPECT_EQ(trace.frees, 2u);
  EXPECT_EQ(trace.devices.size(), 3u);  // "" and the two devices
}

TEST_F(Recorded, ReplayingARecordingOfAReplayGivesTheSamePeaks) {
  const Trace original = read_trace(std::string(PLIMSOLL_TRACES_DIR) + "/gpt-6-512-b8.trace");
  auto device = sim_device("sim:4GiB", 4 * GiB);
  auto recording = Recording::open(path_);
  device->record_to(recording);
  const telemetry::ReplayResult first = telemetry::replay(original, *device);
  recording->close();

  const Trace recorded = read_trace(path_);
  EXPECT_EQ(recorded.allocations, original.allocations);
  EXPECT_EQ(recorded.frees, original.frees);
  EXPECT_EQ(recorded.peak_live_bytes, original.peak_live_bytes);
  auto fresh = sim_device("sim:4GiB", 4 * GiB);
  const telemetry::ReplayResult second = telemetry::replay(recorded, *fresh);
  EXPECT_EQ(second.peak_reserved_bytes, first.peak_reserved_bytes);
  EXPECT_EQ(second.peak_in_use_bytes, first.peak_in_use_bytes);
}

TEST_F(Recorded, ARecordingCutShortIsReadUpToTheCut) {
  auto device = sim_device("sim:4GiB");
  auto recording = Recording::open(path_);
  device->record_to(recording);
  for (int i = 0; i < 10; ++i) device->deallocate(device->allocate(4096));
  recording->close();
  std::string bytes = file_bytes();
  bytes.resize(bytes.size() - sizeof(binary::EventRecord) - 20);  // the end record and part of the last free
  write_bytes(bytes);
  const Trace trace = read_trace(path_);
  EXPECT_TRUE(trace.cut_short);
  EXPECT_EQ(trace.allocations, 10u);
  EXPECT_EQ(trace.frees, 9u);
}

TEST_F(Recorded, AnUnwritablePathIsNamed) {
  try {
    Recording::open("/nonexistent-folder/run.plimsoll");
    FAIL() << "opened an unwritable path";
  } catch (const InvalidArgument& error) {
    EXPECT_THAT(error.what(), HasSubstr("/nonexistent-folder/run.plimsoll"));
    EXPECT_THAT(error.what(), HasSubstr("writable folder"));
  }
}

TEST_F(Recorded, AFailedWriteStopsTheRecordingAndCloseSaysWhy) {
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP() << "no /dev/full to fail writes on";
  auto device = sim_device("sim:4GiB");
  auto recording = Recording::open("/dev/full", {.buffer_bytes = 0});  // the smallest buffer: flushes early
  device->record_to(recording);
  for (int i = 0; i < 20000; ++i) device->deallocate(device->allocate(4096));
  device->record_to(nullptr);
  try {
    recording->close();
    FAIL() << "a recording to /dev/full closed without an error";
  } catch (const InvalidArgument& error) {
    EXPECT_THAT(error.what(), HasSubstr("/dev/full"));
    EXPECT_THAT(error.what(), HasSubstr("No space left on device"));
  }
  EXPECT_TRUE(recording->closed());
}

TEST_F(Recorded, SnapshotListsSegmentsAndBlocksWithTags) {
  auto device = sim_device("sim:4GiB");
  void* big = device->allocate(3 * MiB, "weights");
  void* small = device->allocate(1000, "activations");
  const nlohmann::json snapshot = nlohmann::json::parse(device->snapshot());
  EXPECT_EQ(snapshot["device"], "sim:4GiB");
  std::uint64_t segment_bytes = 0;
  for (const auto& segment : snapshot["segments"]) segment_bytes += segment["bytes"].get<std::uint64_t>();
  EXPECT_EQ(segment_bytes, device->stats().reserved_bytes);
  std::uint64_t allocated = 0;
  std::vector<std::string> tags;
  for (const auto& block : snapshot["blocks"]) {
    if (block["state"] != "allocated") continue;
    allocated += block["bytes"].get<std::uint64_t>();
    tags.push_back(block["tag"]);
  }
  EXPECT_EQ(allocated, device->stats().in_use_bytes);
  EXPECT_THAT(tags, ::testing::UnorderedElementsAre("weights", "activations"));
  device->deallocate(big);
  device->deallocate(small);
}

TEST_F(Recorded, CallSitesNameTheFirstFrameOutsidePlimsoll) {
  auto device = sim_device("sim:4GiB");
  auto recording = Recording::open(path_, {.call_sites = true});
  device->record_to(recording);
  void* block = recording_test_user_allocates(*device, 4096);
  void* other = recording_test_other_user_code(*device);
  const nlohmann::json snapshot = nlohmann::json::parse(device->snapshot());
  device->deallocate(block);
  device->deallocate(other);
  recording->close();

  std::string snapshot_site;
  for (const auto& entry : snapshot["blocks"]) {
    if (entry["state"] == "allocated" && entry["bytes"] == 4096 && entry.contains("call_site")) {
      snapshot_site = entry["call_site"].get<std::string>();
    }
  }
  const Trace trace = read_trace(path_);
  std::vector<std::string> allocation_sites;
  for (const TraceEvent& event : trace.events) {
    if (event.kind == TraceEvent::Kind::allocate) allocation_sites.push_back(trace.sites.at(event.site));
  }
  ASSERT_EQ(allocation_sites.size(), 2u);
  EXPECT_THAT(allocation_sites[0], StartsWith("recording_test_user_allocates("));
  EXPECT_THAT(allocation_sites[1], StartsWith("recording_test_other_user_code("));
  EXPECT_EQ(snapshot_site, allocation_sites[0]);
  for (const std::string& site : allocation_sites) EXPECT_THAT(site, ::testing::Not(StartsWith("plimsoll::")));
}

TEST_F(Recorded, WithoutCallSitesNoSiteIsRecorded) {
  auto device = sim_device("sim:4GiB");
  auto recording = Recording::open(path_);
  device->record_to(recording);
  device->deallocate(recording_test_user_allocates(*device, 4096));
  recording->close();
  const Trace trace = read_trace(path_);
  for (const TraceEvent& event : trace.events) EXPECT_EQ(event.site, 0u);
}

// --- malformed files: each error names the file, the record and the fix ---

std::string header_bytes(std::uint32_t version = binary::kVersion) {
  binary::FileHeader header{};
  std::memcpy(header.magic, binary::kMagic, sizeof header.magic);
  header.version = version;
  header.event_record_bytes = sizeof(binary::EventRecord);
  return std::string(reinterpret_cast<const char*>(&header), sizeof header);
}

std::string event_bytes(binary::RecordKind kind, std::uint64_t id, std::uint64_t bytes = 0, std::uint16_t tag = 0) {
  binary::EventRecord record{kind, 0, 0, tag, 0, 1, 0, 0, id, bytes, 0};
  return std::string(reinterpret_cast<const char*>(&record), sizeof record);
}

std::string string_bytes(binary::StringTable table, std::uint32_t id, std::string_view text) {
  binary::StringRecordHeader header{binary::RecordKind::string, table, 0, id, static_cast<std::uint32_t>(text.size()),
                                    0};
  std::string out(reinterpret_cast<const char*>(&header), sizeof header);
  out += text;
  out.resize(static_cast<std::size_t>(binary::string_record_bytes(text.size())), '\0');
  return out;
}

std::string parse_error(const std::string& bytes) {
  try {
    binary::parse_binary_trace(bytes, "run.plimsoll");
  } catch (const InvalidArgument& error) {
    return error.what();
  }
  return "no error";
}

TEST(RecordingFormatErrors, EachNamesTheProblemAndTheFix) {
  using Kind = binary::RecordKind;
  EXPECT_THAT(parse_error("hello"), StartsWith("run.plimsoll: not a plimsoll trace"));
  EXPECT_THAT(parse_error(header_bytes(2)), HasSubstr("version 2, but this plimsoll reads version 1"));
  EXPECT_THAT(parse_error(header_bytes() + event_bytes(Kind{42}, 1)),
              StartsWith("run.plimsoll: record 1 (byte 32): unknown record kind 42"));
  EXPECT_THAT(parse_error(header_bytes() + event_bytes(Kind::free, 7)),
              HasSubstr("free of id 0x7, which is not live"));
  EXPECT_THAT(parse_error(header_bytes() + event_bytes(Kind::allocate, 7, 8) + event_bytes(Kind::allocate, 7, 8)),
              StartsWith("run.plimsoll: record 2 (byte 80): allocation of id 0x7, which is still live"));
  EXPECT_THAT(parse_error(header_bytes() + event_bytes(Kind::allocate, 0, 8)), HasSubstr("id 0"));
  EXPECT_THAT(parse_error(header_bytes() + string_bytes(binary::StringTable::tag, 1, "a") +
                          string_bytes(binary::StringTable::tag, 1, "b")),
              HasSubstr("string id 1 is defined twice"));
  EXPECT_THAT(parse_error(header_bytes() + event_bytes(Kind::allocate, 1, 8, 5)),
              HasSubstr("tag id 5 is never defined"));
  EXPECT_THAT(parse_error(header_bytes() + event_bytes(Kind::marker, 3)), HasSubstr("marker string 3 is not defined"));
  EXPECT_THAT(parse_error(header_bytes() + event_bytes(Kind::end, 0) + event_bytes(Kind::allocate, 1, 8)),
              HasSubstr("data after the end record"));
  EXPECT_THAT(parse_error(header_bytes() + event_bytes(Kind::allocate, 1, 8) + event_bytes(Kind::end, 5)),
              HasSubstr("the end record counts 5 records before it, but the file has 1"));
  EXPECT_THAT(parse_error(header_bytes() + string_bytes(binary::StringTable{9}, 1, "x")),
              HasSubstr("unknown string table 9"));
  // Reused address after a free is fine.
  EXPECT_EQ(parse_error(header_bytes() + event_bytes(Kind::allocate, 7, 8) + event_bytes(Kind::free, 7) +
                        event_bytes(Kind::allocate, 7, 16) + event_bytes(Kind::free, 7)),
            "no error");
}

}  // namespace
}  // namespace plimsoll
