// BlockPool::make_free (src/engine/block.hpp): the heap's splits write a free record in place, reusing a dropped
// record when there is one. Every field must be set, whatever the reused record held before.
#include <gtest/gtest.h>

#include "engine/block.hpp"

namespace plimsoll::engine {
namespace {

TEST(EngineBlockPool, AFreeRecordReusesADroppedOneAndSetsEveryField) {
  BlockPool pool;
  const BlockIndex used = pool.make(Block{.addr = 0x1000, .size = 0x800, .requested = 0x7ff, .prev = 3, .next = 4,
                                          .free_prev = 5, .free_next = 6, .span_head = 7, .tag = 9, .free = false,
                                          .small = false, .page = true});
  const BlockIndex other = pool.make(Block{.addr = 0x2000, .size = 0x100});
  pool.drop(used);
  const BlockIndex made = pool.make_free(0x4000, 0x300, other, kNoBlock, true);
  EXPECT_EQ(made, used);  // the dropped record, not a new one
  const Block& block = pool[made];
  EXPECT_EQ(block.addr, 0x4000u);
  EXPECT_EQ(block.size, 0x300u);
  EXPECT_EQ(block.requested, 0u);
  EXPECT_EQ(block.prev, other);
  EXPECT_EQ(block.next, kNoBlock);
  EXPECT_EQ(block.free_prev, kNoBlock);
  EXPECT_EQ(block.free_next, kNoBlock);
  EXPECT_EQ(block.span_head, kNoBlock);
  EXPECT_EQ(block.tag, 0u);
  EXPECT_TRUE(block.free);
  EXPECT_TRUE(block.small);
  EXPECT_FALSE(block.page);
  EXPECT_EQ(pool.records(), 2u);
}

// Records are one cache line each (block.hpp): a pool that lost the alignment, or a Block that grew past 64 bytes,
// would put records across two lines again.
TEST(EngineBlockPool, EveryRecordSitsAloneOnOneCacheLine) {
  static_assert(sizeof(Block) == 64 && alignof(Block) == 64);
  BlockPool pool;
  for (std::uint64_t i = 0; i < 3000; ++i) {  // past several reallocations of the pool
    pool.make_free(i << 8, 256, kNoBlock, kNoBlock, false);
    ASSERT_TRUE(pool.ready(5));
  }
  for (BlockIndex i = 0; i < 3000; ++i)
    ASSERT_EQ(reinterpret_cast<std::uintptr_t>(&pool[i]) % 64, 0u) << "record " << i;
}

TEST(EngineBlockPool, AFreeRecordGrowsThePoolWhenNoneIsDropped) {
  BlockPool pool;
  for (std::uint64_t i = 0; i < 1000; ++i) {  // past several reallocations of the pool
    const BlockIndex made = pool.make_free(i << 8, 256, kNoBlock, kNoBlock, i % 2 == 0);
    ASSERT_EQ(made, i);
  }
  for (std::uint64_t i = 0; i < 1000; ++i) {
    const Block& block = pool[static_cast<BlockIndex>(i)];
    ASSERT_EQ(block.addr, i << 8);
    ASSERT_EQ(block.small, i % 2 == 0);
    ASSERT_TRUE(block.free);
  }
  for (BlockIndex i = 0; i < 1000; ++i) pool.drop(i);  // drops past the vacant list's capacity
  EXPECT_EQ(pool.records(), 0u);
  EXPECT_EQ(pool.make_free(0x100, 256, kNoBlock, kNoBlock, false), 999u);  // the last dropped comes back first
}

}  // namespace
}  // namespace plimsoll::engine
