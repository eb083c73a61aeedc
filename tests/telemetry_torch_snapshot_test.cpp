// PyTorch memory snapshots through tools/torch_snapshot/to_plimsoll.py: synthetic snapshots from make_snapshot.py
// read back by plimsoll::read_trace and checked event by event against what the generator simulated; a snapshot
// written by hand and checked field by field; a pickle that would run code, refused without running; every kind of
// malformed input answered with exit status 2 and a message naming the file and the entry.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <ostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cli_runner.hpp"
#include "plimsoll/trace.hpp"

namespace plimsoll {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;
using Kind = TraceEvent::Kind;

const std::string kTools = std::string(PLIMSOLL_SOURCE_DIR) + "/tools/torch_snapshot/";

bool have_python3() { return std::system("python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' "
                                         ">/dev/null 2>&1") == 0; }

#define SKIP_WITHOUT_PYTHON3() \
  if (!have_python3()) GTEST_SKIP() << "python3 (3.11 or later) is not on PATH; the snapshot tools need it"

struct CommandResult {
  int status = -1;
  std::string output;  // stdout and stderr together
};

CommandResult run_command(const std::string& command) {
  CommandResult result;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) {
    ADD_FAILURE() << "popen failed for " << command;
    return result;
  }
  char buffer[4096];
  std::size_t got = 0;
  while ((got = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) result.output.append(buffer, got);
  const int wait_status = pclose(pipe);
  result.status = WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : -1;
  return result;
}

// A fresh folder per test: ctest runs the tests of one file in parallel processes.
std::string scratch_dir() {
  const std::string dir = ::testing::TempDir() + "torch_snapshot_" +
                          ::testing::UnitTest::GetInstance()->current_test_info()->name();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir + "/";
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream file(path, std::ios::binary);
  file << text;
}

CommandResult convert(const std::string& snapshot, const std::string& output, const std::string& options = "") {
  return run_command("python3 '" + kTools + "to_plimsoll.py' '" + snapshot + "' '" + output + "' " + options);
}

CommandResult make_snapshot(const std::string& snapshot, const std::string& options) {
  return run_command("python3 '" + kTools + "make_snapshot.py' '" + snapshot + "' " + options);
}

// Runs a Python program that writes `path` (it sees the path as `path`).
void write_with_python(const std::string& dir, const std::string& path, const std::string& program) {
  const std::string script = dir + "writer.py";
  write_file(script, "import pickle, sys\npath = sys.argv[1]\n" + program);
  const CommandResult written = run_command("python3 '" + script + "' '" + path + "'");
  ASSERT_EQ(written.status, 0) << written.output;
}

std::string kind_name(Kind kind) {
  switch (kind) {
    case Kind::allocate: return "allocate";
    case Kind::free: return "free";
    case Kind::map: return "map";
    case Kind::unmap: return "unmap";
    case Kind::oom: return "oom";
    case Kind::marker: return "marker";
  }
  return "?";
}

struct ExpectedEvent {
  std::string kind, device;
  std::uint64_t time_ns = 0, id = 0, bytes = 0, stream = 0;
  std::string site;
};

std::vector<ExpectedEvent> read_expected(const std::string& path) {
  std::vector<ExpectedEvent> events;
  std::istringstream lines(testing::read_text_file(path));
  std::string line;
  while (std::getline(lines, line)) {
    std::vector<std::string> fields;
    std::size_t start = 0;
    for (std::size_t tab = line.find('\t'); tab != std::string::npos; tab = line.find('\t', start)) {
      fields.push_back(line.substr(start, tab - start));
      start = tab + 1;
    }
    fields.push_back(line.substr(start));
    if (fields.size() != 7) {
      ADD_FAILURE() << path << ": expected 7 tab-separated fields: " << line;
      continue;
    }
    events.push_back({fields[0], fields[1], std::stoull(fields[2]), std::stoull(fields[3]), std::stoull(fields[4]),
                      std::stoull(fields[5]), fields[6]});
  }
  return events;
}

// Every event of `trace` against the generator's list; frees must end the allocation of the same id and device.
void expect_trace_matches(const Trace& trace, const std::vector<ExpectedEvent>& expected) {
  ASSERT_EQ(trace.events.size(), expected.size());
  std::map<std::pair<std::string, std::uint64_t>, std::uint32_t> live_slots;
  std::uint32_t next_slot = 0;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const TraceEvent& event = trace.events[i];
    const ExpectedEvent& want = expected[i];
    SCOPED_TRACE("event " + std::to_string(i) + ": " + want.kind + " " + want.device + " t=" +
                 std::to_string(want.time_ns));
    ASSERT_EQ(kind_name(event.kind), want.kind);
    EXPECT_EQ(trace.devices.at(event.device), want.device);
    EXPECT_EQ(event.time_ns, want.time_ns);
    EXPECT_EQ(event.bytes, want.bytes);
    EXPECT_EQ(event.stream, want.stream);
    EXPECT_EQ(trace.sites.at(event.site), want.site);
    EXPECT_EQ(event.thread, 0u);  // snapshots do not say which thread allocated
    EXPECT_EQ(trace.tags.at(event.tag), "");
    const auto key = std::make_pair(want.device, want.id);
    if (event.kind == Kind::allocate) {
      EXPECT_EQ(event.slot, next_slot++);
      EXPECT_TRUE(live_slots.emplace(key, event.slot).second) << "id " << want.id << " allocated while live";
    } else if (event.kind == Kind::free) {
      const auto found = live_slots.find(key);
      ASSERT_NE(found, live_slots.end()) << "free of id " << want.id << ", not live";
      EXPECT_EQ(event.slot, found->second);
      live_slots.erase(found);
    } else if (event.kind == Kind::marker) {
      EXPECT_EQ(trace.markers.at(event.slot), "torch memory snapshot");
    }
  }
}

struct GeneratorCase {
  const char* name;
  const char* options;
};

// Test names in ctest's output read "ReadsBackExactlyWhatWasSimulated/Default", not the struct's bytes.
void PrintTo(const GeneratorCase& test_case, std::ostream* out) { *out << test_case.name; }

class TelemetryTorchSnapshotGenerated : public ::testing::TestWithParam<GeneratorCase> {};

TEST_P(TelemetryTorchSnapshotGenerated, ReadsBackExactlyWhatWasSimulated) {
  SKIP_WITHOUT_PYTHON3();
  const std::string dir = scratch_dir();
  const CommandResult made = make_snapshot(dir + "s.pickle", "--expected '" + dir + "expected.tsv' " +
                                           GetParam().options);
  ASSERT_EQ(made.status, 0) << made.output;
  const CommandResult converted = convert(dir + "s.pickle", dir + "s.plimsoll");
  ASSERT_EQ(converted.status, 0) << converted.output;
  EXPECT_THAT(converted.output, HasSubstr(" events ("));
  EXPECT_THAT(converted.output, HasSubstr("time span"));

  const std::vector<ExpectedEvent> expected = read_expected(dir + "expected.tsv");
  ASSERT_GT(expected.size(), 10u);
  const Trace trace = read_trace(dir + "s.plimsoll");
  EXPECT_FALSE(trace.cut_short);
  EXPECT_TRUE(trace.has_times);
  expect_trace_matches(trace, expected);
}

INSTANTIATE_TEST_SUITE_P(
    Snapshots, TelemetryTorchSnapshotGenerated,
    ::testing::Values(GeneratorCase{"Default", ""},
                      GeneratorCase{"TwoDevicesOomCppFrames", "--devices 2 --oom --cpp-frames --seed 3"},
                      GeneratorCase{"RingBufferDroppedTheStart", "--max-entries 40 --steps 4"},
                      GeneratorCase{"OnlyRequestedFrees", "--no-completed-frees --devices 2"},
                      GeneratorCase{"NoTimesExpandable", "--no-times --expandable --devices 2"},
                      GeneratorCase{"LongerRun", "--seed 11 --steps 20 --layers 24 --max-bytes 9000000"}),
    [](const ::testing::TestParamInfo<GeneratorCase>& param_info) { return std::string(param_info.param.name); });

// A snapshot has no step markers: its steps come from the repeating allocation pattern (docs/leaks.md, "Steps
// without markers"). The generator's steps are identical, so every one is found, each a whole forward and backward.
TEST(TelemetryTorchSnapshot, StepsAreDetectedFromTheRepeatingPattern) {
  SKIP_WITHOUT_PYTHON3();
  const std::string dir = scratch_dir();
  ASSERT_EQ(make_snapshot(dir + "s.pickle", "--steps 7 --layers 6 --seed 4").status, 0);
  const CommandResult converted = convert(dir + "s.pickle", dir + "s.plimsoll");
  ASSERT_EQ(converted.status, 0) << converted.output;
  const Trace trace = read_trace(dir + "s.plimsoll");
  ASSERT_EQ(trace.step_source, StepSource::detected) << trace.step_detection.summary;
  ASSERT_EQ(trace.steps.size(), 7u) << trace.step_detection.summary;
  for (const TraceStep& step : trace.steps) {
    std::size_t allocations = 0;
    for (std::size_t index = step.begin; index < step.end; ++index) {
      if (trace.events[index].kind == Kind::allocate) ++allocations;
    }
    EXPECT_EQ(allocations, 12u) << "step " << step.number;  // 6 activations and 6 gradients
    EXPECT_EQ(trace.events[step.begin].kind, Kind::allocate) << "step " << step.number;
  }
  EXPECT_EQ(trace.step_detection.repeating_fraction, 1.0);
}

TEST(TelemetryTorchSnapshot, GeneratorIsDeterministicBySeed) {
  SKIP_WITHOUT_PYTHON3();
  const std::string dir = scratch_dir();
  for (const char* name : {"a", "b"}) {
    ASSERT_EQ(make_snapshot(dir + name + ".pickle", "--seed 5 --oom").status, 0);
  }
  ASSERT_EQ(make_snapshot(dir + "c.pickle", "--seed 6 --oom").status, 0);
  const std::string a = testing::read_text_file(dir + "a.pickle");
  EXPECT_EQ(a, testing::read_text_file(dir + "b.pickle"));
  EXPECT_NE(a, testing::read_text_file(dir + "c.pickle"));
}

// A snapshot written out literally, so every expected value below is checked by hand rather than by the generator.
constexpr const char* kHandWrittenSnapshot = R"(
torch_frame = {"filename": "/usr/lib/python3/site-packages/torch/nn/modules/module.py", "line": 1527,
               "name": "_call_impl"}
cpp_frame = {"filename": "/opt/pytorch/c10/cuda/CUDACachingAllocator.cpp", "line": 900, "name": "c10::cuda::malloc"}
unsymbolized = {"filename": "/opt/lib/libtorch_cuda.so", "line": 0, "name": "??"}
interpreter = {"filename": "/build/python3.11/Python/ceval.c", "line": 5000, "name": "_PyEval_EvalFrameDefault"}
user = {"filename": "/home/me/net.py", "line": 12, "name": "forward"}
caller = {"filename": "/home/me/train.py", "line": 40, "name": "main"}
stack = [cpp_frame, unsymbolized, torch_frame, interpreter, user, caller]
t0 = 1_700_000_000_000_000
device0 = [
    {"action": "segment_alloc", "addr": 0x7f0000000000, "size": 2097152, "stream": 0, "time_us": t0, "frames": stack},
    {"action": "alloc", "addr": 0x7f0000000000, "size": 1000, "stream": 0, "time_us": t0 + 5, "frames": stack},
    {"action": "alloc", "addr": 0x7f0000000400, "size": 24, "stream": 140000000, "time_us": t0 + 7,
     "frames": [torch_frame]},
    {"action": "free_requested", "addr": 0x7f0000000000, "size": 1000, "stream": 0, "time_us": t0 + 9, "frames": []},
    {"action": "free_completed", "addr": 0x7f0000000000, "size": 1000, "stream": 0, "time_us": t0 + 12},
    {"action": "free_completed", "addr": 0x7f0000100000, "size": 4096, "stream": 7, "time_us": t0 + 13},
    {"action": "annotate", "addr": 0x7f0000000400, "time_us": t0 + 14},
    {"action": "oom", "size": 1 << 40, "stream": -1, "device_free": 5, "time_us": t0 + 20, "frames": [user]},
    {"action": "segment_free", "addr": 0x7f0000200000, "size": 2097152, "stream": 0, "time_us": t0 + 30},
    {"action": "snapshot", "addr": 0, "size": 0, "stream": 0, "time_us": t0 + 31},
]
device1 = [
    {"action": "alloc", "addr": 0x7f0000000000, "size": 64, "stream": 0, "time_us": t0 + 6, "frames": [caller]},
    {"action": "free_requested", "addr": 0x7f0000000000, "size": 64, "stream": 0, "time_us": t0 + 8},
]
# The allocator's state at the end: of the allocated blocks, only the one at 0x7f0000400000 is not live in the trace.
segments = [
    {"device": 0, "address": 0x7f0000000000, "total_size": 2097152, "stream": 0, "blocks": [
        {"address": 0x7f0000000000, "size": 1024, "requested_size": 0, "state": "inactive"},
        {"address": 0x7f0000000400, "size": 512, "requested_size": 24, "state": "active_allocated"}]},
    {"device": 0, "address": 0x7f0000400000, "total_size": 2097152, "stream": 99, "blocks": [
        {"address": 0x7f0000400000, "size": 512, "requested_size": 500, "state": "active_allocated"},
        {"address": 0x7f0000400200, "size": 512, "requested_size": 300, "state": "active_pending_free"}]},
    {"device": 1, "address": 0x7f0000000000, "total_size": 2097152, "stream": 0, "blocks": [
        {"address": 0x7f0000000000, "size": 512, "requested_size": 0, "state": "inactive"}]},
]
with open(path, "wb") as out:
    pickle.dump({"segments": segments, "device_traces": [device0, device1], "allocator_settings": {}}, out)
)";

TEST(TelemetryTorchSnapshot, HandWrittenSnapshotMapsEveryAction) {
  SKIP_WITHOUT_PYTHON3();
  const std::string dir = scratch_dir();
  write_with_python(dir, dir + "hand.pickle", kHandWrittenSnapshot);
  const CommandResult converted = convert(dir + "hand.pickle", dir + "hand.plimsoll");
  ASSERT_EQ(converted.status, 0) << converted.output;
  // Blocks live before the trace began, and said so: the one freed at 0x7f0000100000, never allocated in the
  // trace, and the one the segments hold allocated at 0x7f0000400000.
  EXPECT_THAT(converted.output, HasSubstr("cuda:0: 1 blocks (4096 bytes) are freed but never allocated"));
  EXPECT_THAT(converted.output,
              HasSubstr("cuda:0: 1 blocks (500 bytes) are allocated in the snapshot's segments but not in the trace"));
  EXPECT_THAT(converted.output,
              HasSubstr("12 events (5 allocate, 3 free, 1 map, 1 unmap, 1 oom, 1 marker) on 2 devices (cuda:0, "
                        "cuda:1), time span 0.000031 s"));

  const Trace trace = read_trace(dir + "hand.plimsoll");
  struct Want {
    Kind kind;
    const char* device;
    std::uint64_t time_ns, bytes, stream;
    const char* site;
  };
  const std::vector<Want> wants = {
      {Kind::allocate, "cuda:0", 0, 4096, 7, ""},   // live at the start: freed in the trace
      {Kind::allocate, "cuda:0", 0, 500, 99, ""},   // live throughout: in the segments; the segment's stream
      {Kind::map, "cuda:0", 0, 2097152, 0, ""},
      {Kind::allocate, "cuda:0", 5000, 1000, 0, "forward (/home/me/net.py:12)"},
      {Kind::allocate, "cuda:1", 6000, 64, 0, "main (/home/me/train.py:40)"},
      {Kind::allocate, "cuda:0", 7000, 24, 140000000, ""},  // only torch frames: no call site
      {Kind::free, "cuda:1", 8000, 0, 0, ""},               // device 1 has no completed frees: requested ones count
      {Kind::free, "cuda:0", 12000, 0, 0, ""},              // device 0 has: its free_requested is skipped
      {Kind::free, "cuda:0", 13000, 0, 7, ""},
      {Kind::oom, "cuda:0", 20000, std::uint64_t{1} << 40, ~std::uint64_t{0}, "forward (/home/me/net.py:12)"},
      {Kind::unmap, "cuda:0", 30000, 2097152, 0, ""},
      {Kind::marker, "cuda:0", 31000, 0, 0, ""},
  };
  ASSERT_EQ(trace.events.size(), wants.size());
  for (std::size_t i = 0; i < wants.size(); ++i) {
    SCOPED_TRACE("event " + std::to_string(i));
    const TraceEvent& event = trace.events[i];
    EXPECT_EQ(event.kind, wants[i].kind);
    EXPECT_EQ(trace.devices.at(event.device), wants[i].device);
    EXPECT_EQ(event.time_ns, wants[i].time_ns);
    EXPECT_EQ(event.bytes, wants[i].bytes);
    EXPECT_EQ(event.stream, wants[i].stream);
    EXPECT_EQ(trace.sites.at(event.site), wants[i].site);
  }
  EXPECT_EQ(trace.events[7].slot, trace.events[3].slot);  // the free ends the allocation at the same address
  EXPECT_EQ(trace.events[6].slot, trace.events[4].slot);
  EXPECT_EQ(trace.events[8].slot, trace.events[0].slot);
  EXPECT_EQ(trace.markers, std::vector<std::string>{"torch memory snapshot"});
  EXPECT_EQ(trace.peak_live_bytes, 4096u + 500 + 1000 + 64 + 24);
}

TEST(TelemetryTorchSnapshot, DeviceOptionConvertsOneDevice) {
  SKIP_WITHOUT_PYTHON3();
  const std::string dir = scratch_dir();
  write_with_python(dir, dir + "hand.pickle", kHandWrittenSnapshot);
  const CommandResult converted = convert(dir + "hand.pickle", dir + "one.plimsoll", "--device 1");
  ASSERT_EQ(converted.status, 0) << converted.output;
  EXPECT_THAT(converted.output, HasSubstr("2 events (1 allocate, 1 free) on 1 device (cuda:1)"));
  const Trace trace = read_trace(dir + "one.plimsoll");
  ASSERT_EQ(trace.events.size(), 2u);
  EXPECT_EQ(trace.devices.at(trace.events[0].device), "cuda:1");
  EXPECT_EQ(trace.events[0].time_ns, 0u);  // device 1's first entry starts the recording
  EXPECT_EQ(trace.events[1].time_ns, 2000u);
}

TEST(TelemetryTorchSnapshot, RefusesAPickleThatWouldRunCode) {
  SKIP_WITHOUT_PYTHON3();
  const std::string dir = scratch_dir();
  const std::string ran = dir + "code_ran";
  // What an attacker would ship as a "snapshot": unpickling it with pickle.load calls os.system.
  write_with_python(dir, dir + "evil.pickle",
                    "import os\n"
                    "class Evil:\n"
                    "    def __reduce__(self):\n"
                    "        return (os.system, ('touch " + ran + "',))\n"
                    "with open(path, 'wb') as out:\n"
                    "    pickle.dump({'segments': [], 'device_traces': [[Evil()]]}, out)\n");
  const CommandResult converted = convert(dir + "evil.pickle", dir + "evil.plimsoll");
  EXPECT_EQ(converted.status, 2);
  EXPECT_THAT(converted.output, AllOf(StartsWith("to_plimsoll.py: error: " + dir + "evil.pickle: "),
                                      HasSubstr("names the global posix.system"), HasSubstr("can run code"),
                                      Not(HasSubstr("Traceback"))));
  EXPECT_FALSE(std::filesystem::exists(ran)) << "the pickle's code ran";
  EXPECT_FALSE(std::filesystem::exists(dir + "evil.plimsoll"));
  EXPECT_FALSE(std::filesystem::exists(dir + "evil.plimsoll.partial"));
}

struct MalformedCase {
  const char* name;
  const char* writer;    // Python that writes `path`
  const char* options;   // extra converter options
  const char* message;   // expected in the error, after "to_plimsoll.py: error: FILE: "
};

void PrintTo(const MalformedCase& test_case, std::ostream* out) { *out << test_case.name; }

class TelemetryTorchSnapshotMalformed : public ::testing::TestWithParam<MalformedCase> {};

TEST_P(TelemetryTorchSnapshotMalformed, ExitsTwoWithAClearMessage) {
  SKIP_WITHOUT_PYTHON3();
  const std::string dir = scratch_dir();
  const std::string snapshot = dir + "bad.pickle";
  write_with_python(dir, snapshot, GetParam().writer);
  const CommandResult converted = convert(snapshot, dir + "bad.plimsoll", GetParam().options);
  EXPECT_EQ(converted.status, 2) << converted.output;
  EXPECT_THAT(converted.output, AllOf(StartsWith("to_plimsoll.py: error: " + snapshot + ": "),
                                      HasSubstr(GetParam().message), Not(HasSubstr("Traceback"))));
  EXPECT_FALSE(std::filesystem::exists(dir + "bad.plimsoll"));
}

// `entry(**fields)`: a valid alloc entry with some fields replaced (... removes one); `dump(traces, segments)`
// writes a snapshot of them.
#define SNAPSHOT_HELPERS                                                                                    \
  "def entry(**fields):\n"                                                                                  \
  "    base = {'action': 'alloc', 'addr': 4096, 'size': 8, 'stream': 0, 'time_us': 1, 'frames': []}\n"      \
  "    base.update(fields)\n"                                                                               \
  "    return {k: v for k, v in base.items() if v is not ...}\n"                                            \
  "def dump(traces, segments=()):\n"                                                                        \
  "    pickle.dump({'segments': list(segments), 'device_traces': traces}, open(path, 'wb'))\n"

INSTANTIATE_TEST_SUITE_P(
    Inputs, TelemetryTorchSnapshotMalformed,
    ::testing::Values(
        MalformedCase{"NotAPickle", "open(path, 'w').write('Thread,Time,Action\\n')", "", "not a pickle"},
        MalformedCase{"EmptyFile", "open(path, 'w')", "", "not a pickle (EOFError"},
        MalformedCase{"CutShortPickle",
                      "data = pickle.dumps({'segments': [], 'device_traces': [[{'action': 'alloc'}]]})\n"
                      "open(path, 'wb').write(data[:len(data) // 2])",
                      "", "not a pickle"},
        MalformedCase{"NotADict", "pickle.dump([1, 2], open(path, 'wb'))", "", "holds a list, not a snapshot dict"},
        MalformedCase{"MissingTraces", "pickle.dump({'segments': []}, open(path, 'wb'))", "",
                      "no 'device_traces' key"},
        MalformedCase{"TracesNotLists", SNAPSHOT_HELPERS "dump([entry()])", "", "not a list of lists"},
        MalformedCase{"EntryNotADict", SNAPSHOT_HELPERS "dump([[entry(), 'alloc']])", "",
                      "device 0, entry 1: the entry is str, not a dict"},
        MalformedCase{"MissingSize", SNAPSHOT_HELPERS "dump([[], [entry(), entry(addr=8192, size=...)]])", "",
                      "device 1, entry 1: 'size' is missing from the 'alloc' entry"},
        MalformedCase{"MissingAddr", SNAPSHOT_HELPERS "dump([[entry(action='free_completed', addr=...)]])", "",
                      "device 0, entry 0: 'addr' is missing from the 'free_completed' entry"},
        MalformedCase{"AddrNotAnInteger", SNAPSHOT_HELPERS "dump([[entry(addr='0x1000')]])", "",
                      "device 0, entry 0: 'addr' is str '0x1000', not an integer"},
        MalformedCase{"SizeIsABool", SNAPSHOT_HELPERS "dump([[entry(size=True)]])", "",
                      "'size' is bool True, not an integer"},
        MalformedCase{"NegativeSize", SNAPSHOT_HELPERS "dump([[entry(size=-8)]])", "",
                      "'size' is -8, outside 0 .. 2^64-1"},
        MalformedCase{"UnknownAction", SNAPSHOT_HELPERS "dump([[entry(), entry(action='teleport')]])", "",
                      "device 0, entry 1: unknown action 'teleport'"},
        MalformedCase{"MissingAction", SNAPSHOT_HELPERS "dump([[entry(action=...)]])", "", "'action' is missing"},
        MalformedCase{"FramesNotAList", SNAPSHOT_HELPERS "dump([[entry(frames='model.py')]])", "",
                      "'frames' is str, not a list"},
        MalformedCase{"FrameWithoutLine",
                      SNAPSHOT_HELPERS "dump([[entry(frames=[{'filename': 'a.py', 'name': 'f'}])]])", "",
                      "device 0, entry 0: frame 0 is"},
        MalformedCase{"AllocatedTwice", SNAPSHOT_HELPERS "dump([[entry(), entry(time_us=2)]])", "",
                      "device 0, entry 1: 'alloc' at 0x1000, which is still live (allocated by entry 0"},
        MalformedCase{"FreedTwice",
                      SNAPSHOT_HELPERS "free = entry(action='free_requested')\ndump([[entry(), free, free]])", "",
                      "device 0, entry 2: 'free_requested' of 0x1000, which entry 1 freed already"},
        MalformedCase{"SomeEntriesUntimed", SNAPSHOT_HELPERS "dump([[entry(), entry(addr=8192, time_us=...)]])", "",
                      "device 0, entry 1: 'time_us' is missing while other entries have it"},
        MalformedCase{"SegmentsNotAList", "pickle.dump({'segments': 5, 'device_traces': [[]]}, open(path, 'wb'))",
                      "", "'segments' is int, not a list"},
        MalformedCase{"SegmentWithoutBlocks", SNAPSHOT_HELPERS "dump([[entry()]], [{'device': 0, 'stream': 0}])", "",
                      "segment 0: 'blocks' is missing, not list"},
        MalformedCase{"BlockAddressNotAnInteger",
                      SNAPSHOT_HELPERS "dump([[entry()]], [{'device': 0, 'stream': 0, 'blocks': [{'state': "
                                       "'active_allocated', 'address': '0x10', 'requested_size': 8}]}])",
                      "", "segment 0, block 0: 'address' is str '0x10', not int"},
        MalformedCase{"NoSuchDevice", SNAPSHOT_HELPERS "dump([[entry()]])", "--device 3",
                      "--device 3, but the snapshot has traces of devices 0 .. 0"}),
    [](const ::testing::TestParamInfo<MalformedCase>& param_info) { return std::string(param_info.param.name); });

TEST(TelemetryTorchSnapshot, MissingFileIsAClearError) {
  SKIP_WITHOUT_PYTHON3();
  const std::string dir = scratch_dir();
  const CommandResult converted = convert(dir + "absent.pickle", dir + "out.plimsoll");
  EXPECT_EQ(converted.status, 2);
  EXPECT_THAT(converted.output, AllOf(HasSubstr(dir + "absent.pickle: cannot read the snapshot: No such file"),
                                      Not(HasSubstr("Traceback"))));
}

TEST(TelemetryTorchSnapshot, UnwritableOutputIsAClearError) {
  SKIP_WITHOUT_PYTHON3();
  const std::string dir = scratch_dir();
  write_with_python(dir, dir + "hand.pickle", kHandWrittenSnapshot);
  const CommandResult converted = convert(dir + "hand.pickle", dir + "no/such/folder/out.plimsoll");
  EXPECT_EQ(converted.status, 2);
  EXPECT_THAT(converted.output, AllOf(HasSubstr("cannot write the trace"), Not(HasSubstr("Traceback"))));
}

}  // namespace
}  // namespace plimsoll
