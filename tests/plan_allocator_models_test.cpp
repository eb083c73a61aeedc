// The reference models' rules, one concrete outcome each: region and segment sizes, when blocks are split,
// what coalesces, best fit, and what happens at the memory limit. Breaking a rule in allocator_models.cpp
// must fail one of these.
#include <cstdint>
#include <optional>
#include <vector>

#include <gtest/gtest.h>

#include "plan/allocator_models.hpp"

namespace plimsoll::plan {
namespace {

constexpr std::uint64_t kKiB = std::uint64_t{1} << 10;
constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;

using Sizes = std::vector<std::uint64_t>;

template <class Model>
std::uint64_t must_allocate(Model& model, std::uint64_t bytes) {
  const std::optional<std::uint64_t> address = model.allocate(bytes);
  EXPECT_TRUE(address.has_value()) << "allocating " << bytes << " bytes failed";
  return address.value_or(0);
}

// ----- TensorFlow BFC, allow_growth -----------------------------------------------------------------------------

TEST(BfcModel, RoundsTo256BytesAndBinsByPowersOfTwo) {
  EXPECT_EQ(BfcModel::rounded_bytes(1), 256u);
  EXPECT_EQ(BfcModel::rounded_bytes(256), 256u);
  EXPECT_EQ(BfcModel::rounded_bytes(257), 512u);
  EXPECT_EQ(BfcModel::bin_for_size(256), 0);
  EXPECT_EQ(BfcModel::bin_for_size(511), 0);
  EXPECT_EQ(BfcModel::bin_for_size(512), 1);
  EXPECT_EQ(BfcModel::bin_for_size(1 * kMiB), 12);
  EXPECT_EQ(BfcModel::bin_for_size(256 * kMiB), 20);
  EXPECT_EQ(BfcModel::bin_for_size(4096 * kMiB), 20);
}

TEST(BfcModel, FirstRequestGetsA2MiBRegionAndTheNextRegionDoubles) {
  BfcModel model;
  const std::uint64_t a = must_allocate(model, 1000);
  EXPECT_EQ(model.region_sizes(), Sizes{2 * kMiB});
  EXPECT_EQ(model.chunk_size(a), 1 * kKiB);  // rounded to 256 B, split off the 2 MiB chunk
  EXPECT_EQ(model.next_region_bytes(), 4 * kMiB);
  EXPECT_EQ(model.stats().reserved_bytes, 2 * kMiB);
  EXPECT_EQ(model.stats().in_use_bytes, 1 * kKiB);
  EXPECT_EQ(model.stats().maps, 1u);
}

TEST(BfcModel, ARequestThatDoesNotFitExtendsAndARaisedRegionSizeIsNotDoubledAgain) {
  BfcModel model;
  must_allocate(model, 1 * kKiB);
  must_allocate(model, 3 * kMiB);  // 2 MiB - 1 KiB left: a new region of the current size, 4 MiB
  EXPECT_EQ(model.region_sizes(), (Sizes{2 * kMiB, 4 * kMiB}));
  EXPECT_EQ(model.next_region_bytes(), 8 * kMiB);

  must_allocate(model, 20 * kMiB);  // 8 -> 16 -> 32 MiB to hold it; having been raised, it stays 32 MiB
  EXPECT_EQ(model.region_sizes(), (Sizes{2 * kMiB, 4 * kMiB, 32 * kMiB}));
  EXPECT_EQ(model.next_region_bytes(), 32 * kMiB);

  must_allocate(model, 20 * kMiB);  // the 32 MiB chunk went whole to the first: another 32 MiB, then 64
  EXPECT_EQ(model.region_sizes(), (Sizes{2 * kMiB, 4 * kMiB, 32 * kMiB, 32 * kMiB}));
  EXPECT_EQ(model.next_region_bytes(), 64 * kMiB);
  EXPECT_EQ(model.stats().reserved_bytes, 70 * kMiB);
  EXPECT_EQ(model.stats().maps, 4u);
}

TEST(BfcModel, SplitsOnlyWhenTheChunkIsAtLeastTwiceTheRequest) {
  BfcModel padded;
  const std::uint64_t a = must_allocate(padded, 1536 * kKiB);  // 2 MiB < 2 x 1.5 MiB: handed out whole
  EXPECT_EQ(padded.chunk_size(a), 2 * kMiB);
  EXPECT_EQ(padded.stats().in_use_bytes, 2 * kMiB);
  EXPECT_EQ(padded.free_chunk_count(), 0u);

  BfcModel split;
  const std::uint64_t b = must_allocate(split, 1 * kMiB);  // exactly half: split
  EXPECT_EQ(split.chunk_size(b), 1 * kMiB);
  EXPECT_EQ(split.free_chunk_count(), 1u);
}

TEST(BfcModel, SplitsWhenKeepingTheChunkWholeWouldWaste128MiB) {
  BfcModel wasteful;
  const std::uint64_t a = must_allocate(wasteful, 300 * kMiB);  // a 512 MiB region; 212 MiB spare >= 128 MiB
  EXPECT_EQ(wasteful.region_sizes(), Sizes{512 * kMiB});
  EXPECT_EQ(wasteful.chunk_size(a), 300 * kMiB);

  BfcModel padded;
  const std::uint64_t b = must_allocate(padded, 200 * kMiB);  // a 256 MiB region; 56 MiB spare: not split
  EXPECT_EQ(padded.region_sizes(), Sizes{256 * kMiB});
  EXPECT_EQ(padded.chunk_size(b), 256 * kMiB);
}

TEST(BfcModel, FreedNeighboursCoalesceAndBestFitPicksTheSmallestChunk) {
  BfcModel model;
  const std::uint64_t a = must_allocate(model, 512 * kKiB);
  const std::uint64_t b = must_allocate(model, 256 * kKiB);
  const std::uint64_t c = must_allocate(model, 256 * kKiB);
  const std::uint64_t d = must_allocate(model, 256 * kKiB);
  EXPECT_EQ(b, a + 512 * kKiB);
  EXPECT_EQ(c, b + 256 * kKiB);
  model.deallocate(a);
  model.deallocate(c);
  // Free: a (512 KiB), c (256 KiB), the tail after d (768 KiB). 256 KiB goes to c, the smallest that fits,
  // though a comes first in memory.
  EXPECT_EQ(must_allocate(model, 256 * kKiB), c);

  model.deallocate(b);  // b merges into a: one 768 KiB chunk at a
  EXPECT_EQ(model.chunk_size(a), 768 * kKiB);
  EXPECT_EQ(model.chunk_size(b), 0u);
  model.deallocate(c);  // and c with it: 1 MiB at a
  EXPECT_EQ(model.chunk_size(a), 1 * kMiB);
  model.deallocate(d);  // everything: one chunk covering the region
  EXPECT_EQ(model.chunk_size(a), 2 * kMiB);
  EXPECT_EQ(model.free_chunk_count(), 1u);
  EXPECT_EQ(model.stats().in_use_bytes, 0u);
  EXPECT_EQ(model.stats().maps, 1u);
}

TEST(BfcModel, EqualChunksGoLowestAddressFirst) {
  BfcModel model;
  std::vector<std::uint64_t> blocks;
  for (int i = 0; i < 5; ++i) blocks.push_back(must_allocate(model, 256 * kKiB));
  model.deallocate(blocks[3]);
  model.deallocate(blocks[1]);
  EXPECT_EQ(must_allocate(model, 200 * kKiB), blocks[1]);
  EXPECT_EQ(must_allocate(model, 200 * kKiB), blocks[3]);
  EXPECT_EQ(must_allocate(model, 200 * kKiB), blocks[4] + 256 * kKiB);  // the region's tail
}

TEST(BfcModel, FreeRegionsDoNotCoalesceAcrossRegions) {
  BfcModel model;
  const std::uint64_t a = must_allocate(model, 1536 * kKiB);  // 2 MiB region, whole
  const std::uint64_t b = must_allocate(model, 3 * kMiB);     // 4 MiB region, whole
  model.deallocate(a);
  model.deallocate(b);
  EXPECT_EQ(model.free_chunk_count(), 2u);
  must_allocate(model, 5 * kMiB);  // 6 MiB free in all, but in two regions: a new 8 MiB region
  EXPECT_EQ(model.region_sizes(), (Sizes{2 * kMiB, 4 * kMiB, 8 * kMiB}));
  EXPECT_EQ(model.stats().reserved_bytes, 14 * kMiB);
  EXPECT_EQ(model.stats().unmaps, 0u);
}

TEST(BfcModel, MemoryLimitCapsTheRegionAndThenRefuses) {
  BfcModel model({5 * kMiB, true});
  must_allocate(model, 1 * kKiB);
  must_allocate(model, 2560 * kKiB);  // the next region would be 4 MiB; 3 MiB are left under the limit
  EXPECT_EQ(model.region_sizes(), (Sizes{2 * kMiB, 3 * kMiB}));
  must_allocate(model, 1 * kMiB);  // fits in the first region's tail
  EXPECT_EQ(model.allocate(1536 * kKiB), std::nullopt);
  EXPECT_EQ(model.stats().ooms, 1u);
  EXPECT_EQ(model.stats().reserved_bytes, 5 * kMiB);
}

TEST(BfcModel, GarbageCollectionGivesBackFreeRegionsWhenAnExtensionFails) {
  for (const bool collect : {true, false}) {
    BfcModel model({8 * kMiB, collect});
    const std::uint64_t a = must_allocate(model, 1536 * kKiB);  // 2 MiB region
    must_allocate(model, 3 * kMiB);                             // 4 MiB region; 6 MiB reserved
    model.deallocate(a);
    // 3.5 MiB: the free 2 MiB region is too small and only 2 MiB are left under the limit. Giving the free
    // region back leaves 4 MiB: a 4 MiB region (the 8 MiB region size capped).
    const std::optional<std::uint64_t> b = model.allocate(3584 * kKiB);
    if (collect) {
      EXPECT_TRUE(b.has_value());
      EXPECT_EQ(model.region_sizes(), (Sizes{4 * kMiB, 4 * kMiB}));
      EXPECT_EQ(model.stats().unmaps, 1u);
      EXPECT_EQ(model.stats().maps, 3u);
      EXPECT_EQ(model.stats().reserved_bytes, 8 * kMiB);
    } else {
      EXPECT_FALSE(b.has_value());
      EXPECT_EQ(model.region_sizes(), (Sizes{2 * kMiB, 4 * kMiB}));
      EXPECT_EQ(model.stats().unmaps, 0u);
    }
  }
}

TEST(BfcModel, ZeroBytesHoldNothing) {
  BfcModel model;
  EXPECT_EQ(model.allocate(0), std::optional<std::uint64_t>{0});
  model.deallocate(0);
  EXPECT_EQ(model.stats().maps, 0u);
  EXPECT_EQ(model.stats().reserved_bytes, 0u);
}

// ----- PyTorch CUDA caching allocator ---------------------------------------------------------------------------

TEST(CudaCachingModel, RoundsTo512BytesAndSizesSegmentsByRequest) {
  EXPECT_EQ(CudaCachingModel::round_size(1), 512u);
  EXPECT_EQ(CudaCachingModel::round_size(512), 512u);
  EXPECT_EQ(CudaCachingModel::round_size(513), 1024u);
  EXPECT_EQ(CudaCachingModel::allocation_size(512 * kKiB), 2 * kMiB);
  EXPECT_EQ(CudaCachingModel::allocation_size(1 * kMiB), 2 * kMiB);
  EXPECT_EQ(CudaCachingModel::allocation_size(1 * kMiB + 512), 20 * kMiB);
  EXPECT_EQ(CudaCachingModel::allocation_size(10 * kMiB - 512), 20 * kMiB);
  EXPECT_EQ(CudaCachingModel::allocation_size(10 * kMiB), 10 * kMiB);
  EXPECT_EQ(CudaCachingModel::allocation_size(12 * kMiB + 512), 14 * kMiB);
}

TEST(CudaCachingModel, SmallRequestGetsA2MiBSegmentThatLaterSmallRequestsShare) {
  CudaCachingModel model;
  const std::uint64_t a = must_allocate(model, 512 * kKiB);
  EXPECT_EQ(model.segment_sizes(), Sizes{2 * kMiB});
  EXPECT_EQ(model.block_size(a), 512 * kKiB);
  EXPECT_EQ(model.cached_block_count(), 1u);  // the 1.5 MiB rest
  EXPECT_EQ(must_allocate(model, 100), a + 512 * kKiB);
  EXPECT_EQ(model.stats().in_use_bytes, 512 * kKiB + 512);
  EXPECT_EQ(model.stats().maps, 1u);
}

TEST(CudaCachingModel, MidSizedRequestGetsA20MiBSegmentLargeOneItsOwn) {
  CudaCachingModel mid;
  const std::uint64_t a = must_allocate(mid, 3 * kMiB);
  EXPECT_EQ(mid.segment_sizes(), Sizes{20 * kMiB});
  EXPECT_EQ(mid.block_size(a), 3 * kMiB);
  EXPECT_EQ(must_allocate(mid, 12 * kMiB), a + 3 * kMiB);  // served from the cached 17 MiB rest
  EXPECT_EQ(mid.segment_sizes(), Sizes{20 * kMiB});

  CudaCachingModel large;
  const std::uint64_t b = must_allocate(large, 12 * kMiB);
  EXPECT_EQ(large.segment_sizes(), Sizes{12 * kMiB});
  EXPECT_EQ(large.block_size(b), 12 * kMiB);
  EXPECT_EQ(large.cached_block_count(), 0u);
  must_allocate(large, 12 * kMiB + 1);  // rounded up to 2 MiB
  EXPECT_EQ(large.segment_sizes(), (Sizes{12 * kMiB, 14 * kMiB}));
  EXPECT_EQ(large.stats().reserved_bytes, 26 * kMiB);
}

TEST(CudaCachingModel, SmallAndLargePoolsAreSeparate) {
  CudaCachingModel model;
  must_allocate(model, 3 * kMiB);  // leaves 17 MiB cached in the large pool
  must_allocate(model, 4 * kKiB);  // still a small segment of its own
  EXPECT_EQ(model.segment_sizes(), (Sizes{20 * kMiB, 2 * kMiB}));
}

TEST(CudaCachingModel, LargeBlocksSplitOnlyWhenMoreThan1MiBWouldRemain) {
  {
    CudaCachingModel model;
    must_allocate(model, 3 * kMiB);
    const std::uint64_t b = must_allocate(model, 16 * kMiB);  // 17 MiB cached, 1 MiB would remain: whole
    EXPECT_EQ(model.block_size(b), 17 * kMiB);
    EXPECT_EQ(model.cached_block_count(), 0u);
    EXPECT_EQ(model.stats().in_use_bytes, 20 * kMiB);
  }
  {
    CudaCachingModel model;
    must_allocate(model, 3 * kMiB);
    const std::uint64_t b = must_allocate(model, 15 * kMiB + 512 * kKiB);  // 1.5 MiB would remain: split
    EXPECT_EQ(model.block_size(b), 15 * kMiB + 512 * kKiB);
    EXPECT_EQ(model.cached_block_count(), 1u);
  }
}

TEST(CudaCachingModel, SmallBlocksSplitDownTo512Bytes) {
  CudaCachingModel model;
  must_allocate(model, 1 * kMiB);
  const std::uint64_t b = must_allocate(model, 1 * kMiB - 512);  // 512 B would remain: split
  EXPECT_EQ(model.block_size(b), 1 * kMiB - 512);
  EXPECT_EQ(must_allocate(model, 1), b + 1 * kMiB - 512);
  EXPECT_EQ(model.segment_sizes(), Sizes{2 * kMiB});
  EXPECT_EQ(model.cached_block_count(), 0u);
}

TEST(CudaCachingModel, FreedBlocksCoalesceInsideTheirSegmentAndStayCached) {
  CudaCachingModel model;
  const std::uint64_t a = must_allocate(model, 3 * kMiB);
  const std::uint64_t b = must_allocate(model, 3 * kMiB);
  const std::uint64_t c = must_allocate(model, 3 * kMiB);
  model.deallocate(b);
  model.deallocate(a);  // a and b: one 6 MiB block at a; the 11 MiB rest after c
  EXPECT_EQ(model.block_size(a), 6 * kMiB);
  EXPECT_EQ(model.cached_block_count(), 2u);
  EXPECT_EQ(must_allocate(model, 5 * kMiB), a);  // best fit: the 6 MiB block, 1 MiB left is not split off
  EXPECT_EQ(model.block_size(a), 6 * kMiB);
  model.deallocate(a);
  model.deallocate(c);
  EXPECT_EQ(model.block_size(a), 20 * kMiB);
  EXPECT_EQ(model.cached_block_count(), 1u);
  EXPECT_EQ(model.stats().reserved_bytes, 20 * kMiB);  // nothing is given back without memory pressure
  EXPECT_EQ(model.stats().unmaps, 0u);
}

TEST(CudaCachingModel, AtTheLimitReleasesWholeCachedSegmentsAndRetries) {
  CudaCachingModel model({30 * kMiB});
  const std::uint64_t a = must_allocate(model, 12 * kMiB);
  must_allocate(model, 14 * kMiB);  // 26 MiB reserved
  model.deallocate(a);
  // No cached block holds 16 MiB and a new segment would make 42 MiB: the cached 12 MiB segment goes back.
  must_allocate(model, 16 * kMiB);
  EXPECT_EQ(model.segment_sizes(), (Sizes{14 * kMiB, 16 * kMiB}));
  EXPECT_EQ(model.stats().unmaps, 1u);
  EXPECT_EQ(model.stats().maps, 3u);
  EXPECT_EQ(model.stats().reserved_bytes, 30 * kMiB);
  EXPECT_EQ(model.stats().peak_reserved_bytes, 30 * kMiB);
}

TEST(CudaCachingModel, AtTheLimitASplitSegmentIsNotReleased) {
  CudaCachingModel model({30 * kMiB});
  const std::uint64_t a = must_allocate(model, 3 * kMiB);
  must_allocate(model, 17 * kMiB);  // the rest of the 20 MiB segment
  model.deallocate(a);              // cached, but its segment is still partly in use
  EXPECT_EQ(model.allocate(12 * kMiB), std::nullopt);
  EXPECT_EQ(model.stats().ooms, 1u);
  EXPECT_EQ(model.stats().unmaps, 0u);
  EXPECT_EQ(model.segment_sizes(), Sizes{20 * kMiB});
}

TEST(CudaCachingModel, ZeroBytesHoldNothing) {
  CudaCachingModel model;
  EXPECT_EQ(model.allocate(0), std::optional<std::uint64_t>{0});
  model.deallocate(0);
  EXPECT_EQ(model.stats().maps, 0u);
}

}  // namespace
}  // namespace plimsoll::plan
