#pragma once
// Reference models of two published GPU allocators, for replaying allocation traces under their placement rules
// without touching memory: addresses are synthetic, only the bookkeeping is done. Written from the documented
// behaviour of
//   - TensorFlow's BFC allocator (tensorflow/core/common_runtime/bfc_allocator.{h,cc}, TF 2.x) as the GPU
//     device uses it with allow_growth, and
//   - PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp, 1.13-era defaults: no expandable
//     segments, max_split_size unlimited, no roundup_power2_divisions, no garbage_collection_threshold),
// one stream and no CUDA graphs. Each rule is commented in allocator_models.cpp with where it comes from
// and, where the model departs from the original, how.
//
// Both models count what a trace replay compares: bytes reserved from the device (regions / segments), how many
// device allocations ("maps") and releases ("unmaps") they made, and the rounded bytes handed out.
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

namespace plimsoll::plan {

struct ModelStats {
  std::uint64_t in_use_bytes = 0;  // rounded (chunk / block) sizes of live allocations
  std::uint64_t peak_in_use_bytes = 0;
  std::uint64_t reserved_bytes = 0;  // sum of the regions / segments held
  std::uint64_t peak_reserved_bytes = 0;
  std::uint64_t maps = 0;    // regions / segments obtained from the device (cudaMalloc calls that succeeded)
  std::uint64_t unmaps = 0;  // regions / segments given back (cudaFree)
  std::uint64_t ooms = 0;    // allocations that failed
};

/// TensorFlow's BFC allocator with allow_growth. allocate() returns a synthetic address, or nullopt where TF
/// would report OOM; a zero-byte request returns address 0 and holds nothing, as TF returns nullptr for it.
class BfcModel {
 public:
  struct Options {
    /// The allocator's total_memory (memory_limit_). Unset: unlimited, i.e. no region is ever refused.
    std::optional<std::uint64_t> memory_limit;
    /// TF_ENABLE_GPU_GARBAGE_COLLECTION (GPUBFCAllocator's default: on). Only acts when an extension fails,
    /// so it never matters without a memory_limit.
    bool garbage_collection = true;
  };

  static constexpr std::uint64_t kMinAllocationSize = 256;
  static constexpr int kNumBins = 21;
  static constexpr std::uint64_t kMaxInternalFragmentation = std::uint64_t{128} << 20;

  BfcModel();
  explicit BfcModel(Options options);

  std::optional<std::uint64_t> allocate(std::uint64_t bytes);
  /// `address` must be one allocate() returned and not yet freed (0 is ignored).
  void deallocate(std::uint64_t address);
  const ModelStats& stats() const noexcept { return stats_; }

  // Introspection, for tests.
  static std::uint64_t rounded_bytes(std::uint64_t bytes);
  static int bin_for_size(std::uint64_t bytes);
  /// The size of the next region an extension would ask for (curr_region_allocation_bytes_).
  std::uint64_t next_region_bytes() const noexcept { return curr_region_bytes_; }
  /// Sizes of the regions held, in the order they were obtained.
  std::vector<std::uint64_t> region_sizes() const;
  /// The size of the chunk starting at `address` (live or free); 0 when no chunk starts there.
  std::uint64_t chunk_size(std::uint64_t address) const;
  std::size_t free_chunk_count() const noexcept;

 private:
  struct Chunk {
    std::uint64_t size = 0;
    std::uint64_t region = 0;  // base address of the region holding it
    bool in_use = false;
  };
  using ChunkMap = std::map<std::uint64_t, Chunk>;  // by address

  std::optional<std::uint64_t> find_chunk(std::uint64_t rounded);
  bool extend(std::uint64_t rounded);
  bool deallocate_free_regions(std::uint64_t rounded);
  void insert_free(ChunkMap::iterator chunk);
  void remove_free(ChunkMap::iterator chunk);
  void note_in_use_change();

  Options options_;
  std::uint64_t memory_limit_;
  std::uint64_t curr_region_bytes_;
  std::uint64_t next_address_;
  ChunkMap chunks_;
  std::map<std::uint64_t, std::uint64_t> regions_;  // base address -> size
  std::vector<std::uint64_t> region_order_;         // base addresses, in the order obtained
  std::vector<std::set<std::pair<std::uint64_t, std::uint64_t>>> bins_;  // per bin: (size, address) of free chunks
  ModelStats stats_;
};

/// PyTorch's CUDA caching allocator (one device, one stream). allocate() returns a synthetic address, or nullopt
/// where PyTorch would raise OutOfMemoryError; a zero-byte request returns address 0 and holds nothing, as
/// PyTorch hands out a null data pointer for it.
class CudaCachingModel {
 public:
  struct Options {
    /// Bytes the allocator may hold in segments (a device's memory, or set_per_process_memory_fraction). Unset:
    /// unlimited, so no segment is ever refused and none is ever released.
    std::optional<std::uint64_t> memory_limit;
  };

  static constexpr std::uint64_t kMinBlockSize = 512;
  static constexpr std::uint64_t kSmallSize = std::uint64_t{1} << 20;
  static constexpr std::uint64_t kSmallBuffer = std::uint64_t{2} << 20;
  static constexpr std::uint64_t kLargeBuffer = std::uint64_t{20} << 20;
  static constexpr std::uint64_t kMinLargeAlloc = std::uint64_t{10} << 20;
  static constexpr std::uint64_t kRoundLarge = std::uint64_t{2} << 20;

  CudaCachingModel();
  explicit CudaCachingModel(Options options);

  std::optional<std::uint64_t> allocate(std::uint64_t bytes);
  /// `address` must be one allocate() returned and not yet freed (0 is ignored).
  void deallocate(std::uint64_t address);
  const ModelStats& stats() const noexcept { return stats_; }

  // Introspection, for tests.
  static std::uint64_t round_size(std::uint64_t bytes);
  static std::uint64_t allocation_size(std::uint64_t rounded);
  /// Sizes of the segments held, in the order they were obtained.
  std::vector<std::uint64_t> segment_sizes() const;
  /// The size of the block starting at `address` (live or cached); 0 when no block starts there.
  std::uint64_t block_size(std::uint64_t address) const;
  std::size_t cached_block_count() const noexcept;

 private:
  struct Block {
    std::uint64_t size = 0;
    std::uint64_t segment = 0;  // base address of the segment holding it
    bool small = false;         // which pool
    bool allocated = false;
  };
  using BlockMap = std::map<std::uint64_t, Block>;  // by address
  using Pool = std::set<std::pair<std::uint64_t, std::uint64_t>>;  // (size, address) of cached blocks

  Pool& pool(bool small) { return small ? small_pool_ : large_pool_; }
  BlockMap::iterator find_free_block(bool small, std::uint64_t rounded);
  std::optional<BlockMap::iterator> alloc_segment(bool small, std::uint64_t segment_bytes);
  void release_cached_segments();
  bool is_whole_segment(BlockMap::const_iterator block) const;

  Options options_;
  std::uint64_t next_address_;
  BlockMap blocks_;
  std::map<std::uint64_t, std::uint64_t> segments_;  // base address -> size
  std::vector<std::uint64_t> segment_order_;
  Pool small_pool_;
  Pool large_pool_;
  ModelStats stats_;
};

}  // namespace plimsoll::plan
