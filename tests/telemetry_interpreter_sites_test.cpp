// Call sites from an interpreter site source (plimsoll/site_source.hpp), as the Python module installs one.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "backings/sim_backing.hpp"
#include "plimsoll/allocator.hpp"
#include "plimsoll/recording.hpp"
#include "plimsoll/site_source.hpp"
#include "plimsoll/trace.hpp"
#include "telemetry/recording/call_sites.hpp"

namespace {

thread_local bool in_interpreter = false;
thread_local std::uint32_t current_line = 0;
int described = 0;

bool fake_innermost(plimsoll::InterpreterFrame& frame) noexcept {
  if (!in_interpreter) return false;
  frame.code = 0x1234;
  frame.line = current_line;
  return true;
}

std::string fake_describe(const plimsoll::InterpreterFrame& frame) {
  ++described;
  return "train.py:" + std::to_string(frame.line);
}

const plimsoll::InterpreterSiteSource kFakeSource{&fake_innermost, &fake_describe};

struct SourceInstalled {
  SourceInstalled() { plimsoll::set_interpreter_site_source(&kFakeSource); }
  ~SourceInstalled() { plimsoll::set_interpreter_site_source(nullptr); }
};

TEST(InterpreterSites, FrameOfTheSourceNamesTheSiteOncePerLine) {
  SourceInstalled installed;
  plimsoll::telemetry::CallSites sites;
  in_interpreter = true;
  current_line = 42;
  const std::uint32_t first = sites.capture();
  const std::uint32_t again = sites.capture();
  current_line = 7;
  const std::uint32_t other = sites.capture();
  in_interpreter = false;
  EXPECT_NE(first, 0u);
  EXPECT_EQ(first, again);
  EXPECT_NE(first, other);
  EXPECT_EQ(sites.describe(first), "train.py:42");
  EXPECT_EQ(sites.describe(other), "train.py:7");
  EXPECT_EQ(described, 2);  // named when first seen, not on every capture
  const auto names = sites.symbolize_all();
  ASSERT_EQ(names.size(), 3u);
  EXPECT_EQ(names[first], "train.py:42");
  ASSERT_EQ(sites.stack(first).size(), 1u);
}

TEST(InterpreterSites, ThreadOutsideTheInterpreterGetsItsNativeStack) {
  SourceInstalled installed;
  plimsoll::telemetry::CallSites sites;
  in_interpreter = false;
  const std::uint32_t native = sites.capture();
  ASSERT_NE(native, 0u);
  EXPECT_NE(sites.frames(native).front(), 0u);  // a real return address, not the interpreter marker
  EXPECT_EQ(sites.describe(native).find("train.py"), std::string::npos);
}

// A process killed while recording (what `plimsoll run` reports on): the file holds every finished step, because
// step() writes the buffer out, and the Python site names, written when first seen; native sites, named only at
// close(), read as unknown instead of making the file unreadable.
TEST(InterpreterSites, RecordingCutShortKeepsStepsAndInterpreterSiteNames) {
  SourceInstalled installed;
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("plimsoll_interpreter_sites_" + std::to_string(::getpid()) + ".plimsoll")).string();
  const std::string copy = path + ".cut";
  {
    plimsoll::DeviceDescription description;
    description.name = "sim:1GiB";
    description.hardware = "simulated device";
    description.limit_bytes = std::uint64_t{1} << 30;
    description.total_bytes = std::uint64_t{1} << 30;
    plimsoll::Allocator device(description, std::make_unique<plimsoll::backings::SimBacking>(std::uint64_t{1} << 30));
    auto recording = plimsoll::Recording::open(path, {.call_sites = true});
    device.record_to(recording);
    plimsoll::step();
    in_interpreter = true;
    current_line = 12;
    void* from_python = device.allocate(4096);
    in_interpreter = false;
    void* native = device.allocate(4096);
    plimsoll::step();
    std::filesystem::copy_file(path, copy, std::filesystem::copy_options::overwrite_existing);  // as if killed here
    device.deallocate(from_python);
    device.deallocate(native);
    device.record_to(nullptr);
    recording->close();
  }
  const plimsoll::Trace trace = plimsoll::read_trace(copy);
  std::filesystem::remove(path);
  std::filesystem::remove(copy);
  EXPECT_TRUE(trace.cut_short);
  ASSERT_EQ(trace.steps.size(), 1u);
  ASSERT_EQ(trace.allocations, 2u);
  std::vector<std::string> named;
  for (const plimsoll::TraceEvent& event : trace.events) {
    if (event.kind == plimsoll::TraceEvent::Kind::allocate) named.push_back(trace.sites[event.site]);
  }
  ASSERT_EQ(named.size(), 2u);
  EXPECT_EQ(named[0], "train.py:12");
  EXPECT_EQ(named[1], "");  // native: named at close(), which never came
}

}  // namespace
