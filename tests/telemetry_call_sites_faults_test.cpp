// A recording with call sites, out of host memory inside a device's noexcept try_allocate (under its lock): a new
// stack's record (CallSites::insert) and a new interpreter site's name (Recording::Impl::name_new_sites) need host
// memory there; a std::bad_alloc leaving them was std::terminate. Failures are injected by replacing operator new in
// this test program (failing_operator_new.hpp); the tests skip under a sanitizer, whose runtime owns operator new.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "backings/sim_backing.hpp"
#include "plimsoll/allocator.hpp"
#include "plimsoll/recording.hpp"
#include "plimsoll/site_source.hpp"
#include "plimsoll/trace.hpp"

#include "failing_operator_new.hpp"
#include "sim_device.hpp"

namespace plimsoll {
namespace {

thread_local bool in_interpreter = false;
thread_local std::uint32_t current_line = 0;
thread_local bool fail_after_describe = false;  // host memory runs out right after the frame's name was made
thread_local bool describe_throws = false;       // the interpreter's describe() (caller code) throws

bool fake_innermost(InterpreterFrame& frame) noexcept {
  if (!in_interpreter) return false;
  frame.code = 0x5678;
  frame.line = current_line;
  return true;
}

// Longer than a short string's inline room, so copying it allocates.
std::string fake_describe(const InterpreterFrame& frame) {
  if (describe_throws) throw std::runtime_error("the interpreter could not name the frame");
  std::string name = "a/long/path/to/the/training/script.py:" + std::to_string(frame.line);
  if (fail_after_describe) t_fail_new = true;
  return name;
}

const InterpreterSiteSource kFakeSource{&fake_innermost, &fake_describe};

struct SourceInstalled {
  SourceInstalled() { set_interpreter_site_source(&kFakeSource); }
  ~SourceInstalled() { set_interpreter_site_source(nullptr); }
};

std::string temp_trace(const char* name) {
  return (std::filesystem::temp_directory_path() / (std::string(name) + std::to_string(::getpid()) + ".plimsoll"))
      .string();
}

// Books of the device warm (block records to reuse, the tag's counter): only the recording needs host memory.
void warm(Allocator& device) {
  std::vector<void*> blocks;
  for (int i = 0; i < 64; ++i) blocks.push_back(device.allocate(4096));
  for (void* p : blocks) device.deallocate(p);
}

std::vector<std::string> allocation_sites(const Trace& trace) {
  std::vector<std::string> named;
  for (const TraceEvent& event : trace.events) {
    if (event.kind == TraceEvent::Kind::allocate)
      named.push_back(event.site < trace.sites.size() ? trace.sites[event.site] : std::string("?"));
  }
  return named;
}

// A warmed simulated device recording call sites to a temporary trace, with the fake interpreter installed and the
// program inside it at `line`; sites() detaches the recording, closes it and reads back each allocation's site.
struct RecordedDevice {
  RecordedDevice(const char* name, std::uint32_t line)
      : path(temp_trace(name)),
        device(testing_support::sim_device(), std::make_unique<backings::SimBacking>(4ull << 30)) {
    device.set_step_plan(false);
    warm(device);
    recording = Recording::open(path, {.call_sites = true});
    device.record_to(recording);
    in_interpreter = true;
    current_line = line;
  }
  ~RecordedDevice() { in_interpreter = false; }
  RecordedDevice(const RecordedDevice&) = delete;
  RecordedDevice& operator=(const RecordedDevice&) = delete;
  std::vector<std::string> sites() {
    device.record_to(nullptr);
    recording->close();
    const Trace trace = read_trace(path);
    std::filesystem::remove(path);
    return allocation_sites(trace);
  }
  const SourceInstalled installed;  // first: the source outlives the device and its recording
  const std::string path;
  Allocator device;
  std::shared_ptr<Recording> recording;
};

// A new stack out of host memory: the allocation goes on without a call site, nothing half made in the call sites.
TEST(TelemetryCallSitesFaults, ANewSiteOutOfHostMemoryIsLeftOutNotTerminate) {
  SKIP_UNLESS_NEW_CAN_FAIL();
  RecordedDevice recorded("plimsoll_sites_faults_capture_", 10);
  Allocator& device = recorded.device;
  device.deallocate(device.allocate(4096));  // one site known
  current_line = 11;
  void* p = nullptr;
  {
    const ScopedFailures failing;
    p = device.try_allocate(4096);  // terminated here before: the new stack's record threw
  }
  EXPECT_NE(p, nullptr) << "the device had room: only the call site gives way";
  void* again = device.allocate(4096);  // with host memory again, the site is captured and named
  in_interpreter = false;
  device.deallocate(p);
  device.deallocate(again);
  EXPECT_EQ(device.stats().live_allocations, 0u);
  const std::vector<std::string> named = recorded.sites();
  ASSERT_EQ(named.size(), 3u);
  EXPECT_EQ(named[0], "a/long/path/to/the/training/script.py:10");
  EXPECT_EQ(named[1], "") << "no call site when none could be recorded";
  EXPECT_EQ(named[2], "a/long/path/to/the/training/script.py:11");
}

// The stack is recorded, then its name cannot be written at once (the name's copy fails): the allocation goes on
// with its site, and close() names the site, as it names every site not written yet.
TEST(TelemetryCallSitesFaults, ASiteThatCannotBeNamedAtOnceIsNamedAtClose) {
  SKIP_UNLESS_NEW_CAN_FAIL();
  RecordedDevice recorded("plimsoll_sites_faults_name_", 20);
  Allocator& device = recorded.device;
  fail_after_describe = true;
  void* p = device.try_allocate(4096);  // terminated here before: naming the new site threw
  t_fail_new = false;
  fail_after_describe = false;
  in_interpreter = false;
  EXPECT_NE(p, nullptr);
  device.deallocate(p);
  EXPECT_EQ(device.stats().live_allocations, 0u);
  const std::vector<std::string> named = recorded.sites();
  ASSERT_EQ(named.size(), 1u);
  EXPECT_EQ(named[0], "a/long/path/to/the/training/script.py:20") << "named at close()";
}

// The interpreter's describe() is caller code: whatever it throws inside the noexcept try_allocate (under the
// device's lock) leaves the allocation without a call site; only std::bad_alloc was caught before (std::terminate).
// No operator new failure: runs under a sanitizer too.
TEST(TelemetryCallSitesFaults, AnInterpreterDescribeThatThrowsLeavesTheSiteOutNotTerminate) {
  RecordedDevice recorded("plimsoll_sites_faults_throw_", 30);
  Allocator& device = recorded.device;
  describe_throws = true;
  void* p = device.try_allocate(4096);  // terminated here before
  describe_throws = false;
  current_line = 31;
  void* again = device.allocate(4096);
  in_interpreter = false;
  EXPECT_NE(p, nullptr) << "the device had room: only the call site gives way";
  device.deallocate(p);
  device.deallocate(again);
  EXPECT_EQ(device.stats().live_allocations, 0u);
  const std::vector<std::string> named = recorded.sites();
  ASSERT_EQ(named.size(), 2u);
  EXPECT_EQ(named[0], "") << "no call site when the interpreter could not name it";
  EXPECT_EQ(named[1], "a/long/path/to/the/training/script.py:31");
}

}  // namespace
}  // namespace plimsoll
