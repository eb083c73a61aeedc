// The process's table of tag names (src/engine/tags.cpp): names get ids from 1 up, and the last id, 0xFFFF, stays the
// per-thread caches' own (engine::kFrontTag), so a program that names too many tags is refused before reaching it.
// Its own test binary: the table is process-wide and this test fills it.
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/thread_cache.hpp"
#include "plimsoll/allocator.hpp"
#include "plimsoll/error.hpp"

namespace {

TEST(EngineTagTable, TheCachesTagIsNeverAProgramsTag) {
  plimsoll::Tag last = 0;
  std::string refusal;
  for (int i = 0; i < 0x10000 && refusal.empty(); ++i) {
    try {
      last = plimsoll::intern_tag("tag-" + std::to_string(i));
    } catch (const plimsoll::InvalidArgument& error) {
      refusal = error.what();
    }
  }
  EXPECT_EQ(last, plimsoll::engine::kFrontTag - 1) << "the last tag a program gets";
  EXPECT_THAT(refusal, ::testing::HasSubstr("too many distinct tags"));
  EXPECT_EQ(plimsoll::intern_tag("tag-7"), plimsoll::intern_tag("tag-7")) << "known names still resolve";
}

}  // namespace
