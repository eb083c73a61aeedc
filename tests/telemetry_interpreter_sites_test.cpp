// Call sites from an interpreter site source (plimsoll/site_source.hpp), as the Python module installs one.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "plimsoll/site_source.hpp"
#include "telemetry/call_sites.hpp"

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

}  // namespace
