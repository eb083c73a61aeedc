// The sharing variables read inside a governed process (sharing/settings.hpp): a value that parses is taken, one that
// does not falls back to the default and is said once on stderr, naming the variable, what it takes and what is used.
#include <cstdlib>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "sharing/settings.hpp"

namespace {

using ::testing::HasSubstr;

class ScopedVariable {
 public:
  ScopedVariable(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
  ~ScopedVariable() { ::unsetenv(name_); }
  ScopedVariable(const ScopedVariable&) = delete;
  ScopedVariable& operator=(const ScopedVariable&) = delete;

 private:
  const char* name_;
};

TEST(SharingSettings, TrimWaitTakesMillisecondsAndSaysOnceWhatItIgnored) {
  {
    const ScopedVariable wait("PLIMSOLL_SHARE_TRIM_WAIT_MS", "50");
    EXPECT_EQ(plimsoll::sharing::trim_wait().count(), 50);
  }
  EXPECT_EQ(plimsoll::sharing::trim_wait().count(), 200);  // unset: the default
  const ScopedVariable wait("PLIMSOLL_SHARE_TRIM_WAIT_MS", "soon");
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(plimsoll::sharing::trim_wait().count(), 200);
  EXPECT_EQ(plimsoll::sharing::trim_wait().count(), 200);
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(said, HasSubstr("PLIMSOLL_SHARE_TRIM_WAIT_MS=\"soon\" is ignored: give a whole number of milliseconds"));
  EXPECT_EQ(said.find("ignored"), said.rfind("ignored")) << "said more than once: " << said;
}

TEST(SharingSettings, ContextBytesTakesASizeAndSaysOnceWhatItIgnored) {
  {
    const ScopedVariable bytes("PLIMSOLL_SHARE_CONTEXT_BYTES", "500MiB");
    EXPECT_EQ(plimsoll::sharing::context_bytes_override(), std::uint64_t{500} << 20);
  }
  EXPECT_EQ(plimsoll::sharing::context_bytes_override(), std::nullopt);
  const ScopedVariable bytes("PLIMSOLL_SHARE_CONTEXT_BYTES", "lots");
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(plimsoll::sharing::context_bytes_override(), std::nullopt);
  EXPECT_EQ(plimsoll::sharing::context_bytes_override(), std::nullopt);
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(said, HasSubstr("PLIMSOLL_SHARE_CONTEXT_BYTES=\"lots\" is ignored: give a size such as 512MiB"));
  EXPECT_EQ(said.find("ignored"), said.rfind("ignored")) << "said more than once: " << said;
}

}  // namespace
