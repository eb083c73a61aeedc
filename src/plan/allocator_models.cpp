#include "plan/allocator_models.hpp"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>

#include "util/checked_math.hpp"

// Written from the published rules of each allocator; the sources named below were read for the rules only.
//   BFC: tensorflow/core/common_runtime/bfc_allocator.{h,cc} and gpu/gpu_bfc_allocator.cc (TF 2.x).
//   CUDA caching: c10/cuda/CUDACachingAllocator.cpp (PyTorch 1.13 era).
//
// Deviations common to both models:
//   - Addresses are synthetic: every region / segment gets a fresh range above the previous one, with a gap,
//     so two of them are never adjacent. On real hardware cudaMalloc decides; only tie-breaks between free
//     blocks of equal size ("lowest address first") can come out differently.
//   - One stream, no CUDA graphs, no events: a freed block is reusable at once.

namespace plimsoll::plan {
namespace {

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
// Where synthetic address ranges start, and the gap left after each region / segment.
constexpr std::uint64_t kAddressBase = std::uint64_t{1} << 40;
constexpr std::uint64_t kAddressGap = 2 * kMiB;
// "No limit": large enough never to refuse a trace, small enough that sums of sizes cannot overflow.
constexpr std::uint64_t kUnlimited = std::uint64_t{1} << 62;

std::uint64_t next_range(std::uint64_t& next_address, std::uint64_t bytes) {
  const std::uint64_t base = next_address;
  next_address = util::round_up(base + bytes, kAddressGap) + kAddressGap;
  return base;
}

int floor_log2(std::uint64_t value) {
  int result = -1;
  while (value != 0) {
    value >>= 1;
    ++result;
  }
  return result;
}

[[noreturn]] void bad_free(const char* model, std::uint64_t address) {
  throw std::invalid_argument(std::string(model) + ": free of address " + std::to_string(address) +
                              ", which is not a live allocation");
}

void note_peaks(ModelStats& stats) {
  stats.peak_in_use_bytes = std::max(stats.peak_in_use_bytes, stats.in_use_bytes);
  stats.peak_reserved_bytes = std::max(stats.peak_reserved_bytes, stats.reserved_bytes);
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// TensorFlow BFC allocator, allow_growth.

BfcModel::BfcModel() : BfcModel(Options{}) {}

BfcModel::BfcModel(Options options)
    : options_(options),
      memory_limit_(options.memory_limit.value_or(kUnlimited)),
      // Constructor, allow_growth: the first region is 2 MiB, or the whole memory limit when that is smaller,
      // rounded up to kMinAllocationSize.
      curr_region_bytes_(rounded_bytes(std::min(memory_limit_, 2 * kMiB))),
      next_address_(kAddressBase),
      bins_(static_cast<std::size_t>(kNumBins)) {}

// RoundedBytes: every request is rounded up to a multiple of kMinAllocationSize (256 B). (TF returns nullptr
// for a zero-byte request before rounding; allocate() does the same.)
std::uint64_t BfcModel::rounded_bytes(std::uint64_t bytes) { return util::round_up(bytes, kMinAllocationSize); }

// BinNumForSize: bin b holds free chunks of [256 << b, 256 << (b + 1)) bytes; the last of the kNumBins (21)
// bins takes everything from 256 << 20 (256 MiB) up.
int BfcModel::bin_for_size(std::uint64_t bytes) {
  const std::uint64_t units = std::max<std::uint64_t>(bytes, kMinAllocationSize) / kMinAllocationSize;
  return std::min(kNumBins - 1, floor_log2(units));
}

void BfcModel::insert_free(ChunkMap::iterator chunk) {
  bins_[static_cast<std::size_t>(bin_for_size(chunk->second.size))].emplace(chunk->second.size, chunk->first);
}

void BfcModel::remove_free(ChunkMap::iterator chunk) {
  bins_[static_cast<std::size_t>(bin_for_size(chunk->second.size))].erase({chunk->second.size, chunk->first});
}

void BfcModel::note_in_use_change() { note_peaks(stats_); }

std::optional<std::uint64_t> BfcModel::allocate(std::uint64_t bytes) {
  if (bytes == 0) return std::uint64_t{0};
  const std::uint64_t rounded = rounded_bytes(bytes);
  // AllocateRawInternal: best fit among the free chunks; else extend by a new region and search again; else,
  // with garbage collection, give back the regions that are wholly free and extend again. (The timestamped-chunk
  // path is for freed_by_count users, off for a plain allocation.)
  if (auto found = find_chunk(rounded)) return found;
  if (extend(rounded)) return find_chunk(rounded);
  if (deallocate_free_regions(rounded) && extend(rounded)) return find_chunk(rounded);
  ++stats_.ooms;
  return std::nullopt;
}

std::optional<std::uint64_t> BfcModel::find_chunk(std::uint64_t rounded) {
  // FindChunkPtr: from the request's own bin upwards, the first chunk of at least `rounded` bytes in a bin's set,
  // which is ordered by (size, address): the smallest chunk that fits, the lowest address among equals.
  for (int bin = bin_for_size(rounded); bin < kNumBins; ++bin) {
    auto& free_chunks = bins_[static_cast<std::size_t>(bin)];
    const auto candidate = free_chunks.lower_bound({rounded, 0});
    if (candidate == free_chunks.end()) continue;
    const std::uint64_t address = candidate->second;
    free_chunks.erase(candidate);
    const auto chunk = chunks_.find(address);
    // Split only into "two reasonably large pieces": when the chunk is at least twice the request, or when
    // keeping it whole would waste kMaxInternalFragmentation (128 MiB) or more. Otherwise the whole chunk is
    // handed out, padding included (e.g. a 1.5 MiB request takes a whole free 2 MiB chunk).
    const std::uint64_t size = chunk->second.size;
    if (size >= 2 * rounded || size - rounded >= kMaxInternalFragmentation) {
      chunk->second.size = rounded;
      // SplitChunk: the remainder follows the allocated part and goes straight into its bin; it needs no
      // coalescing because a free chunk never has a free neighbour.
      const auto rest = chunks_.emplace_hint(std::next(chunk), address + rounded,
                                             Chunk{size - rounded, chunk->second.region, false});
      insert_free(rest);
    }
    chunk->second.in_use = true;
    stats_.in_use_bytes += chunk->second.size;
    note_in_use_change();
    return address;
  }
  return std::nullopt;
}

bool BfcModel::extend(std::uint64_t rounded) {
  // Extend: what is left under the memory limit, rounded down to kMinAllocationSize, must hold the request.
  const std::uint64_t available =
      (memory_limit_ - stats_.reserved_bytes) / kMinAllocationSize * kMinAllocationSize;
  if (rounded > available) return false;
  // The region size doubles until it holds the request; the region is that size, capped at what is left.
  bool increased = false;
  while (rounded > curr_region_bytes_) {
    curr_region_bytes_ *= 2;
    increased = true;
  }
  const std::uint64_t bytes = std::min(curr_region_bytes_, available);
  // Deviation: the device allocation never fails here (the model's device is exactly memory_limit bytes), so
  // TF's one-time "backpedal" (retrying at 90% of the size) never happens.
  // The next region doubles only when this extension did not already raise the size: after a 4 MiB region
  // the next is 8 MiB, but after a jump from 8 to 32 MiB for a big request the next is 32 MiB again.
  if (!increased) curr_region_bytes_ *= 2;

  // Each extension is its own region: GPUBFCAllocator's sub-allocator (cudaMalloc) does not support
  // coalescing regions, so chunks never merge across regions. (TF's virtual-memory sub-allocator, which
  // does, is not modelled.)
  const std::uint64_t base = next_range(next_address_, bytes);
  regions_.emplace(base, bytes);
  region_order_.push_back(base);
  stats_.reserved_bytes += bytes;
  ++stats_.maps;
  note_peaks(stats_);
  insert_free(chunks_.emplace(base, Chunk{bytes, base, false}).first);
  return true;
}

bool BfcModel::deallocate_free_regions(std::uint64_t rounded) {
  // DeallocateFreeRegions (garbage collection, TF_ENABLE_GPU_GARBAGE_COLLECTION, default on for GPUs): only after
  // an extension failed. Regions with no chunk in use are given back when, with them gone, the request could
  // fit under the limit; then the caller extends once more.
  if (!options_.garbage_collection) return false;
  std::vector<std::uint64_t> free_regions;
  std::uint64_t free_bytes = 0;
  for (const auto& [base, size] : regions_) {
    // Free chunks always coalesce inside their region, so a wholly free region is one free chunk.
    const auto chunk = chunks_.find(base);
    if (!chunk->second.in_use && chunk->second.size == size) {
      free_regions.push_back(base);
      free_bytes += size;
    }
  }
  if (free_bytes == 0) return false;
  if (rounded > memory_limit_ - stats_.reserved_bytes + free_bytes) return false;
  for (const std::uint64_t base : free_regions) {
    const auto chunk = chunks_.find(base);
    remove_free(chunk);
    chunks_.erase(chunk);
    stats_.reserved_bytes -= regions_.at(base);
    regions_.erase(base);
    region_order_.erase(std::find(region_order_.begin(), region_order_.end(), base));
    ++stats_.unmaps;
  }
  return true;
}

void BfcModel::deallocate(std::uint64_t address) {
  if (address == 0) return;
  auto chunk = chunks_.find(address);
  if (chunk == chunks_.end() || !chunk->second.in_use) bad_free("BfcModel", address);
  chunk->second.in_use = false;
  stats_.in_use_bytes -= chunk->second.size;
  // TryToCoalesce: merge with the next chunk, then into the previous one, when they are free. Neighbours are
  // chunks of the same region only.
  const std::uint64_t region = chunk->second.region;
  const auto next = std::next(chunk);
  if (next != chunks_.end() && next->second.region == region && !next->second.in_use) {
    remove_free(next);
    chunk->second.size += next->second.size;
    chunks_.erase(next);
  }
  if (chunk != chunks_.begin()) {
    const auto prev = std::prev(chunk);
    if (prev->second.region == region && !prev->second.in_use) {
      remove_free(prev);
      prev->second.size += chunk->second.size;
      chunks_.erase(chunk);
      chunk = prev;
    }
  }
  insert_free(chunk);
}

std::vector<std::uint64_t> BfcModel::region_sizes() const {
  std::vector<std::uint64_t> sizes;
  sizes.reserve(region_order_.size());
  for (const std::uint64_t base : region_order_) sizes.push_back(regions_.at(base));
  return sizes;
}

std::uint64_t BfcModel::chunk_size(std::uint64_t address) const {
  const auto chunk = chunks_.find(address);
  return chunk == chunks_.end() ? 0 : chunk->second.size;
}

std::size_t BfcModel::free_chunk_count() const noexcept {
  std::size_t count = 0;
  for (const auto& bin : bins_) count += bin.size();
  return count;
}

// ---------------------------------------------------------------------------------------------------------------
// PyTorch CUDA caching allocator.

CudaCachingModel::CudaCachingModel() : CudaCachingModel(Options{}) {}

CudaCachingModel::CudaCachingModel(Options options) : options_(options), next_address_(kAddressBase) {}

// round_size: at least kMinBlockSize (512 B), else rounded up to a multiple of it. (roundup_power2_divisions
// is off by default.)
std::uint64_t CudaCachingModel::round_size(std::uint64_t bytes) {
  return bytes < kMinBlockSize ? kMinBlockSize : util::round_up(bytes, kMinBlockSize);
}

// get_allocation_size, on the rounded size: requests of at most kSmallSize (1 MiB) come from 2 MiB segments
// (kSmallBuffer); those under kMinLargeAlloc (10 MiB) from 20 MiB segments (kLargeBuffer); larger ones get a
// segment of their own, rounded up to kRoundLarge (2 MiB).
std::uint64_t CudaCachingModel::allocation_size(std::uint64_t rounded) {
  if (rounded <= kSmallSize) return kSmallBuffer;
  if (rounded < kMinLargeAlloc) return kLargeBuffer;
  return util::round_up(rounded, kRoundLarge);
}

CudaCachingModel::BlockMap::iterator CudaCachingModel::find_free_block(bool small, std::uint64_t rounded) {
  // get_free_block: lower_bound in the pool's set ordered by (size, address): the smallest cached block that
  // fits, the lowest address among equals. (The max_split_size checks are moot while it is unlimited.)
  Pool& cached = pool(small);
  const auto candidate = cached.lower_bound({rounded, 0});
  if (candidate == cached.end()) return blocks_.end();
  const std::uint64_t address = candidate->second;
  cached.erase(candidate);
  return blocks_.find(address);
}

std::optional<CudaCachingModel::BlockMap::iterator> CudaCachingModel::alloc_segment(bool small,
                                                                                    std::uint64_t segment_bytes) {
  // alloc_block: one cudaMalloc of the whole segment size; refused when it would take the allocator past its
  // allowed maximum (the model's stand-in for both set_per_process_memory_fraction and a full device).
  if (options_.memory_limit && stats_.reserved_bytes + segment_bytes > *options_.memory_limit) return std::nullopt;
  const std::uint64_t base = next_range(next_address_, segment_bytes);
  segments_.emplace(base, segment_bytes);
  segment_order_.push_back(base);
  stats_.reserved_bytes += segment_bytes;
  ++stats_.maps;
  note_peaks(stats_);
  return blocks_.emplace(base, Block{segment_bytes, base, small, false}).first;
}

bool CudaCachingModel::is_whole_segment(BlockMap::const_iterator block) const {
  const auto segment = segments_.find(block->first);
  return segment != segments_.end() && segment->second == block->second.size;
}

void CudaCachingModel::release_cached_segments() {
  // release_cached_blocks (free_cached_blocks in older releases): every cached block that is not split, i.e. a
  // whole segment, is cudaFree'd; large pool first, then small. Split segments stay.
  for (const bool small : {false, true}) {
    Pool& cached = pool(small);
    for (auto entry = cached.begin(); entry != cached.end();) {
      const auto block = blocks_.find(entry->second);
      if (!is_whole_segment(block)) {
        ++entry;
        continue;
      }
      stats_.reserved_bytes -= block->second.size;
      ++stats_.unmaps;
      segments_.erase(block->first);
      segment_order_.erase(std::find(segment_order_.begin(), segment_order_.end(), block->first));
      blocks_.erase(block);
      entry = cached.erase(entry);
    }
  }
}

std::optional<std::uint64_t> CudaCachingModel::allocate(std::uint64_t bytes) {
  if (bytes == 0) return std::uint64_t{0};
  const std::uint64_t rounded = round_size(bytes);
  // get_pool: the small pool for rounded sizes of at most kSmallSize, else the large pool.
  const bool small = rounded <= kSmallSize;

  // malloc: a cached block; else a new segment; else (release_available_cached_blocks does nothing while
  // max_split_size is unlimited) release every whole cached segment and try the segment once more; else OOM.
  auto block = find_free_block(small, rounded);
  if (block == blocks_.end()) {
    const std::uint64_t segment_bytes = allocation_size(rounded);
    auto fresh = alloc_segment(small, segment_bytes);
    if (!fresh) {
      release_cached_segments();
      fresh = alloc_segment(small, segment_bytes);
    }
    if (!fresh) {
      ++stats_.ooms;
      return std::nullopt;
    }
    block = *fresh;
  }

  // should_split: in the small pool whenever at least kMinBlockSize (512 B) would remain; in the large pool only
  // when more than kSmallSize (1 MiB) would remain (so a block up to 1 MiB too big is handed out whole). The
  // allocation takes the front of the block, the remainder goes back to the pool.
  const std::uint64_t remaining = block->second.size - rounded;
  const bool split = small ? remaining >= kMinBlockSize : remaining > kSmallSize;
  if (split) {
    block->second.size = rounded;
    const auto rest = blocks_.emplace_hint(std::next(block), block->first + rounded,
                                           Block{remaining, block->second.segment, small, false});
    pool(small).emplace(remaining, rest->first);
  }
  block->second.allocated = true;
  stats_.in_use_bytes += block->second.size;
  note_peaks(stats_);
  return block->first;
}

void CudaCachingModel::deallocate(std::uint64_t address) {
  if (address == 0) return;
  auto block = blocks_.find(address);
  if (block == blocks_.end() || !block->second.allocated) bad_free("CudaCachingModel", address);
  block->second.allocated = false;
  stats_.in_use_bytes -= block->second.size;
  // free_block / try_merge_blocks: merge with the previous and the next block of the same segment when they are
  // cached (not allocated), then cache the result in its pool. Segments are never given back here.
  const std::uint64_t segment = block->second.segment;
  Pool& cached = pool(block->second.small);
  if (block != blocks_.begin()) {
    const auto prev = std::prev(block);
    if (prev->second.segment == segment && !prev->second.allocated) {
      cached.erase({prev->second.size, prev->first});
      prev->second.size += block->second.size;
      blocks_.erase(block);
      block = prev;
    }
  }
  const auto next = std::next(block);
  if (next != blocks_.end() && next->second.segment == segment && !next->second.allocated) {
    cached.erase({next->second.size, next->first});
    block->second.size += next->second.size;
    blocks_.erase(next);
  }
  cached.emplace(block->second.size, block->first);
}

std::vector<std::uint64_t> CudaCachingModel::segment_sizes() const {
  std::vector<std::uint64_t> sizes;
  sizes.reserve(segment_order_.size());
  for (const std::uint64_t base : segment_order_) sizes.push_back(segments_.at(base));
  return sizes;
}

std::uint64_t CudaCachingModel::block_size(std::uint64_t address) const {
  const auto block = blocks_.find(address);
  return block == blocks_.end() ? 0 : block->second.size;
}

std::size_t CudaCachingModel::cached_block_count() const noexcept {
  return small_pool_.size() + large_pool_.size();
}

}  // namespace plimsoll::plan
