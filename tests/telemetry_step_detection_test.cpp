// Steps found from the repeating allocation pattern of traces without step markers (detect_steps,
// fill_missing_steps): the shared traces with their step markers stripped must give the markers' steps, the leak
// watch the same verdict; synthetic patterns cover warm-up, leaks, jitter and no repetition at all.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "plimsoll/trace.hpp"
#include "telemetry/leaks/leak_watch.hpp"

namespace plimsoll {
namespace {

using ::testing::HasSubstr;

std::string trace_path(const std::string& file) { return std::string(PLIMSOLL_TRACES_DIR) + "/" + file; }

std::string file_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The trace's text without its "# step N begin/end" lines (other markers stay: they are not step markers).
std::string without_step_markers(const std::string& text) {
  std::string kept;
  kept.reserve(text.size());
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("# step ", 0) == 0) continue;
    kept += line;
    kept += '\n';
  }
  return kept;
}

// Allocations and frees before each event index: positions that survive stripping markers.
std::vector<std::size_t> live_events_before(const Trace& trace) {
  std::vector<std::size_t> before(trace.events.size() + 1, 0);
  for (std::size_t index = 0; index < trace.events.size(); ++index) {
    const TraceEvent::Kind kind = trace.events[index].kind;
    const bool counts = kind == TraceEvent::Kind::allocate || kind == TraceEvent::Kind::free;
    before[index + 1] = before[index] + (counts ? 1 : 0);
  }
  return before;
}

struct Boundary {
  std::size_t begin = 0;  // allocations and frees before the step's first event
  std::size_t end = 0;    // ... before the event after its last
};

std::vector<Boundary> boundaries(const Trace& trace) {
  const std::vector<std::size_t> before = live_events_before(trace);
  std::vector<Boundary> out;
  for (const TraceStep& step : trace.steps) out.push_back(Boundary{before[step.begin], before[step.end]});
  return out;
}

class SharedTraceWithoutMarkers : public ::testing::TestWithParam<const char*> {};

// The detected steps are the markers' steps, boundary for boundary: tolerance 0 events on every shared trace.
TEST_P(SharedTraceWithoutMarkers, DetectedStepsAreTheMarkersSteps) {
  const std::string path = trace_path(GetParam());
  const Trace marked = read_trace(path);
  ASSERT_EQ(marked.step_source, StepSource::markers);
  Trace stripped = parse_trace(without_step_markers(file_text(path)), path);
  ASSERT_TRUE(stripped.steps.empty());
  fill_missing_steps(stripped);

  EXPECT_EQ(stripped.step_source, StepSource::detected) << stripped.step_detection.summary;
  const std::vector<Boundary> expected = boundaries(marked);
  const std::vector<Boundary> found = boundaries(stripped);
  ASSERT_EQ(found.size(), expected.size()) << stripped.step_detection.summary;
  for (std::size_t k = 0; k < found.size(); ++k) {
    EXPECT_EQ(found[k].begin, expected[k].begin) << "step " << k;
    EXPECT_EQ(found[k].end, expected[k].end) << "step " << k;
    EXPECT_EQ(stripped.steps[k].number, static_cast<int>(k));
  }
  EXPECT_GT(stripped.step_detection.repeating_fraction, 0.99);
  EXPECT_THAT(stripped.step_detection.summary, HasSubstr("steps detected from the repeating allocation pattern"));
}

INSTANTIATE_TEST_SUITE_P(Files, SharedTraceWithoutMarkers,
                         ::testing::Values("resnet50-b32.trace", "vgg16-b16.trace", "mobilenet_v2-b64.trace",
                                           "gpt-6-512-b8.trace", "resnet18-b128-sgd.trace",
                                           "leak-retained-batches-resnet18.trace", "leak-clean-resnet18.trace"));

// The leak watch gives the same answer with detected steps as with the markers.
TEST(StepDetection, LeakPairGivesTheSameVerdictWithoutMarkers) {
  for (const char* file : {"leak-retained-batches-resnet18.trace", "leak-clean-resnet18.trace"}) {
    const std::string path = trace_path(file);
    const telemetry::LeakReport with_markers = telemetry::find_leaks(read_trace(path));
    Trace stripped = parse_trace(without_step_markers(file_text(path)), path);
    fill_missing_steps(stripped);
    const telemetry::LeakReport detected = telemetry::find_leaks(stripped);
    EXPECT_EQ(detected.verdict, with_markers.verdict) << file;
    EXPECT_EQ(detected.steps, with_markers.steps) << file;
    EXPECT_DOUBLE_EQ(detected.bytes_per_step, with_markers.bytes_per_step) << file;
    EXPECT_EQ(detected.retained_bytes, with_markers.retained_bytes) << file;
  }
  Trace leaking = parse_trace(without_step_markers(file_text(trace_path("leak-retained-batches-resnet18.trace"))),
                              "leaking");
  fill_missing_steps(leaking);
  const telemetry::LeakReport report = telemetry::find_leaks(leaking);
  EXPECT_TRUE(report.leak());
  EXPECT_DOUBLE_EQ(report.bytes_per_step, 1769472.0);  // one 16x3x96x96 float batch a step
}

// read_trace looks for steps in a file without markers, and says so.
TEST(StepDetection, ReadTraceDetectsStepsOfAFileWithoutMarkers) {
  const std::string stripped_path = testing::TempDir() + "/plimsoll_stripped_gpt.trace";
  {
    std::ofstream out(stripped_path);
    out << without_step_markers(file_text(trace_path("gpt-6-512-b8.trace")));
  }
  const Trace trace = read_trace(stripped_path);
  std::remove(stripped_path.c_str());
  EXPECT_EQ(trace.step_source, StepSource::detected);
  EXPECT_EQ(trace.steps.size(), 3u);
  EXPECT_EQ(trace.step_detection.period_events, 1298u);
  EXPECT_STREQ(to_string(trace.step_source), "detected");
}

// A trace with markers keeps them; detection never runs over them.
TEST(StepDetection, MarkersWin) {
  Trace trace = parse_trace("a 1 8\n# step 0 begin\na 2 16\nf 2\n# step 0 end\nf 1\n", "t");
  fill_missing_steps(trace);
  EXPECT_EQ(trace.step_source, StepSource::markers);
  ASSERT_EQ(trace.steps.size(), 1u);
  EXPECT_TRUE(trace.step_detection.summary.empty());
}

// --- synthetic training loops ---

// Writes a trace in the text format: setup allocations, then steps made by `step_events`, then teardown.
class LoopWriter {
 public:
  std::size_t allocate(std::uint64_t bytes) {
    const std::size_t id = next_id_++;
    text_ += fmt::format("a {} {}\n", id, bytes);
    ++events_;
    return id;
  }
  void free(std::size_t id) {
    text_ += fmt::format("f {}\n", id);
    ++events_;
  }
  void mark_step() { step_starts_.push_back(events_); }
  std::size_t events() const { return events_; }
  const std::string& text() const { return text_; }
  const std::vector<std::size_t>& step_starts() const { return step_starts_; }

 private:
  std::size_t next_id_ = 1;
  std::size_t events_ = 0;
  std::string text_;
  std::vector<std::size_t> step_starts_;
};

struct LoopShape {
  std::size_t steps = 8;
  bool warmup = false;         // the first step also makes optimizer state (kept), so it is longer
  bool leak = false;           // every step keeps its input batch
  bool jitter = false;         // sizes that change in any step, two extra events in one step
  std::uint32_t seed = 1;
};

// A forward/backward step over 12 layers of distinct sizes, with two identical blocks (a repeated layer inside
// the step must not be taken for the step).
struct SyntheticLoop {
  std::string text;
  std::vector<std::size_t> step_starts;  // allocations and frees before each step's first event
  std::size_t end_of_last_step = 0;
};

SyntheticLoop make_loop(const LoopShape& shape) {
  std::mt19937 random(shape.seed);
  LoopWriter writer;
  std::vector<std::size_t> parameters;
  const std::vector<std::uint64_t> layer_bytes{4096, 8192, 12288, 65536, 65536, 65536, 65536,
                                               24576, 36864, 1024, 2048, 640};
  for (std::uint64_t bytes : layer_bytes) parameters.push_back(writer.allocate(bytes));
  std::vector<std::size_t> kept;  // optimizer state and leaked batches
  for (std::size_t step = 0; step < shape.steps; ++step) {
    writer.mark_step();
    const std::size_t batch = writer.allocate(1 << 20);
    std::vector<std::size_t> activations;
    for (std::uint64_t bytes : layer_bytes) {
      activations.push_back(writer.allocate(bytes * 16));
      // Jitter: a data-dependent scratch size now and then in any step, and one step (the fifth) with two events
      // more than the others.
      const bool other_size = shape.jitter && random() % 24 == 0;
      const std::size_t scratch = writer.allocate(other_size ? 256 + 64 * (1 + random() % 8) : 256);
      writer.free(scratch);
      const bool extra = shape.jitter && step == 4 && activations.size() == 5;
      if (extra) writer.free(writer.allocate(64 + random() % 512));
    }
    for (std::size_t layer = layer_bytes.size(); layer-- > 0;) {
      const std::size_t gradient = writer.allocate(layer_bytes[layer]);
      writer.free(activations[layer]);
      writer.free(gradient);
    }
    if (shape.warmup && step == 0) {
      for (std::uint64_t bytes : layer_bytes) kept.push_back(writer.allocate(bytes));
    }
    const std::size_t loss = writer.allocate(4);
    writer.free(loss);
    if (shape.leak) {
      kept.push_back(batch);
    } else {
      writer.free(batch);
    }
  }
  SyntheticLoop loop;
  loop.end_of_last_step = writer.events();
  for (std::size_t id : kept) writer.free(id);
  for (std::size_t id : parameters) writer.free(id);
  loop.text = writer.text();
  loop.step_starts = writer.step_starts();
  return loop;
}

void expect_steps_of(const SyntheticLoop& loop, const LoopShape& shape) {
  Trace trace = parse_trace(loop.text, "synthetic");
  fill_missing_steps(trace);
  ASSERT_EQ(trace.step_source, StepSource::detected) << trace.step_detection.summary;
  const std::vector<Boundary> found = boundaries(trace);
  std::string seen;
  for (const Boundary& b : found) seen += fmt::format(" [{}, {})", b.begin, b.end);
  std::string wanted;
  for (std::size_t start : loop.step_starts) wanted += fmt::format(" {}", start);
  SCOPED_TRACE("found" + seen + "; steps start at" + wanted + fmt::format(", last ends at {}", loop.end_of_last_step));
  ASSERT_EQ(found.size(), shape.steps) << trace.step_detection.summary;
  for (std::size_t k = 0; k < found.size(); ++k) {
    EXPECT_EQ(found[k].begin, loop.step_starts[k]) << "step " << k;
    EXPECT_EQ(found[k].end, k + 1 < found.size() ? loop.step_starts[k + 1] : loop.end_of_last_step) << "step " << k;
  }
}

TEST(StepDetection, SteadyLoop) {
  const LoopShape shape{};
  expect_steps_of(make_loop(shape), shape);
}

TEST(StepDetection, WarmupFirstStepIsAStepOfItsOwn) {
  const LoopShape shape{.warmup = true};
  expect_steps_of(make_loop(shape), shape);
}

TEST(StepDetection, LeakOfOneAllocationPerStep) {
  const LoopShape shape{.steps = 10, .warmup = true, .leak = true};
  const SyntheticLoop loop = make_loop(shape);
  expect_steps_of(loop, shape);
  Trace trace = parse_trace(loop.text, "synthetic");
  fill_missing_steps(trace);
  const telemetry::LeakReport report = telemetry::find_leaks(trace);
  EXPECT_TRUE(report.leak());
  EXPECT_DOUBLE_EQ(report.bytes_per_step, static_cast<double>(1 << 20));
}

TEST(StepDetection, StepsThatDifferByAFewEventsAreFollowed) {
  const LoopShape shape{.steps = 12, .warmup = true, .jitter = true, .seed = 7};
  const SyntheticLoop loop = make_loop(shape);
  Trace trace = parse_trace(loop.text, "synthetic");
  fill_missing_steps(trace);
  // The fifth step is longer, and some sizes differ (else the case tests nothing).
  ASSERT_EQ(loop.step_starts[5] - loop.step_starts[4], loop.step_starts[4] - loop.step_starts[3] + 2);
  expect_steps_of(loop, shape);
  EXPECT_LT(trace.step_detection.repeating_fraction, 1.0);
  EXPECT_GT(trace.step_detection.repeating_fraction, 0.5);
}

// An RMM log has no markers: read_trace finds its steps. The synthetic loop, written as RMM's logging adaptor
// would (addresses for ids; a freed address is a new allocation when it comes back).
TEST(StepDetection, RmmLogGetsItsSteps) {
  const LoopShape shape{.steps = 6, .warmup = true};
  const SyntheticLoop loop = make_loop(shape);
  std::string csv = "Thread,Time,Action,Pointer,Size,Stream\n";
  std::vector<std::uint64_t> bytes_of(1);
  std::istringstream lines(loop.text);
  std::string kind;
  std::uint64_t id = 0;
  std::uint64_t event = 0;
  while (lines >> kind >> id) {
    std::uint64_t bytes = 0;
    if (kind == "a") {
      lines >> bytes;
      if (bytes_of.size() <= id) bytes_of.resize(id + 1);
      bytes_of[id] = bytes;
    } else {
      bytes = bytes_of[id];
    }
    csv += fmt::format("1,00:00:{:02}.{:06},{},{:#x},{},0x0\n", event / 1000000, event % 1000000,
                       kind == "a" ? "allocate" : "free", 0x100000 + id * 0x1000, bytes);
    ++event;
  }
  const std::string path = testing::TempDir() + "/plimsoll_loop_rmm.csv";
  {
    std::ofstream out(path);
    out << csv;
  }
  const Trace trace = read_trace(path);
  std::remove(path.c_str());
  ASSERT_EQ(trace.step_source, StepSource::detected) << trace.step_detection.summary;
  const std::vector<Boundary> found = boundaries(trace);
  ASSERT_EQ(found.size(), shape.steps);
  for (std::size_t k = 0; k < found.size(); ++k) EXPECT_EQ(found[k].begin, loop.step_starts[k]) << "step " << k;
  EXPECT_EQ(found.back().end, loop.end_of_last_step);
}

TEST(StepDetection, NoRepetitionMeansNoSteps) {
  std::mt19937 random(3);
  std::string text;
  std::vector<std::size_t> live;
  std::size_t next_id = 1;
  for (int i = 0; i < 4000; ++i) {
    if (!live.empty() && random() % 2 == 0) {
      const std::size_t at = random() % live.size();
      text += fmt::format("f {}\n", live[at]);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(at));
    } else {
      text += fmt::format("a {} {}\n", next_id, 64 * (1 + random() % 100000));
      live.push_back(next_id++);
    }
  }
  Trace trace = parse_trace(text, "random");
  fill_missing_steps(trace);
  EXPECT_EQ(trace.step_source, StepSource::none);
  EXPECT_TRUE(trace.steps.empty());
  EXPECT_THAT(trace.step_detection.summary, HasSubstr("no steps"));
  EXPECT_THAT(trace.step_detection.summary, HasSubstr("add 'step N begin'"));
  const telemetry::LeakReport report = telemetry::find_leaks(trace);
  EXPECT_EQ(report.verdict, telemetry::LeakVerdict::too_few_steps);
}

TEST(StepDetection, TinyAndEmptyTracesHaveNoSteps) {
  for (const char* text : {"", "a 1 8\nf 1\n", "a 1 8\nf 1\na 2 8\nf 2\na 3 8\nf 3\n"}) {
    Trace trace = parse_trace(text, "tiny");
    fill_missing_steps(trace);
    EXPECT_TRUE(trace.steps.empty()) << text;
    EXPECT_EQ(trace.step_source, StepSource::none);
  }
}

}  // namespace
}  // namespace plimsoll
