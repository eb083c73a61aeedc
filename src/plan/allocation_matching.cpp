#include "plan/allocation_matching.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

namespace plimsoll::plan {
namespace {

// Rounding slack: allocators and libraries pad sizes (alignment, headers), so a linear size is linear to within a
// cache line or two, and a ratio to within a fraction of a percent.
constexpr double kRatioSlack = 0.01;
constexpr std::uint64_t kByteSlack = 256;
// Above this many cells the group is paired greedily instead (a step of a trace with neither tags nor call sites
// is one group).
constexpr std::size_t kMaxLcsCells = std::size_t{16} << 20;
// Share of positional pairs with compatible sizes above which a group of equal counts is paired by position.
constexpr double kPositionalShare = 0.9;
// The longest common subsequence prefers pairs of equal sizes to pairs that are merely compatible, so a constant
// allocation pairs with its twin rather than with a linear one that happens to be in range.
constexpr std::uint32_t kEqualScore = 3;
constexpr std::uint32_t kCompatibleScore = 2;

using Group = std::vector<std::uint32_t>;  // allocation indices, in order

// (segment, tag name, site name) -> the segment's allocations of that group, in order.
std::map<std::tuple<std::uint32_t, std::string_view, std::string_view>, Group> groups_of(const MatchSide& side) {
  std::map<std::tuple<std::uint32_t, std::string_view, std::string_view>, Group> groups;
  const auto& allocations = side.sequence->allocations;
  for (std::uint32_t index = 0; index < allocations.size(); ++index) {
    const SequenceAllocation& allocation = allocations[index];
    const std::string_view tag =
        allocation.tag < side.trace->tags.size() ? std::string_view(side.trace->tags[allocation.tag]) : "";
    const std::string_view site =
        allocation.site < side.trace->sites.size() ? std::string_view(side.trace->sites[allocation.site]) : "";
    groups[{allocation.segment, tag, site}].push_back(index);
  }
  return groups;
}

using Result = std::vector<std::optional<std::uint32_t>>;

void pair_longest_common(const MatchSide& from, const Group& a, const MatchSide& to, const Group& b, Result& result) {
  const auto compatible = [&](std::size_t i, std::size_t j) {
    return sizes_compatible(from.sequence->allocations[a[i]].bytes, from.batch, to.sequence->allocations[b[j]].bytes,
                            to.batch);
  };
  const auto score = [&](std::size_t i, std::size_t j) -> std::uint32_t {
    const std::uint64_t x = from.sequence->allocations[a[i]].bytes;
    const std::uint64_t y = to.sequence->allocations[b[j]].bytes;
    if (x == y) return kEqualScore;
    return sizes_compatible(x, from.batch, y, to.batch) ? kCompatibleScore : 0;
  };
  const std::size_t n = a.size();
  const std::size_t m = b.size();
  if ((n + 1) * (m + 1) > kMaxLcsCells) {
    // Greedy: each allocation takes the next compatible one within a short window.
    constexpr std::size_t kWindow = 64;
    std::size_t j = 0;
    for (std::size_t i = 0; i < n && j < m; ++i) {
      for (std::size_t k = j; k < std::min(m, j + kWindow); ++k) {
        if (compatible(i, k)) {
          result[a[i]] = b[k];
          j = k + 1;
          break;
        }
      }
    }
    return;
  }
  std::vector<std::uint32_t> length((n + 1) * (m + 1), 0);
  const auto at = [&](std::size_t i, std::size_t j) -> std::uint32_t& { return length[i * (m + 1) + j]; };
  for (std::size_t i = n; i-- > 0;) {
    for (std::size_t j = m; j-- > 0;) {
      const std::uint32_t pair = score(i, j);
      at(i, j) = std::max({pair == 0 ? 0 : at(i + 1, j + 1) + pair, at(i + 1, j), at(i, j + 1)});
    }
  }
  std::vector<std::pair<std::size_t, std::size_t>> anchors;  // (i, j) of the pairs the subsequence found
  // Among equally good subsequences, the one whose pairs keep the offset (i - j) of the previous pair: an
  // allocation pairs with the one at its own place rather than with an equal-sized neighbour.
  std::ptrdiff_t offset = 0;
  for (std::size_t i = 0, j = 0; i < n && j < m;) {
    const std::uint32_t pair = score(i, j);
    const bool can_pair = pair != 0 && at(i, j) == at(i + 1, j + 1) + pair;
    const bool can_skip_i = at(i + 1, j) == at(i, j);
    const bool can_skip_j = at(i, j + 1) == at(i, j);
    const auto here = static_cast<std::ptrdiff_t>(i) - static_cast<std::ptrdiff_t>(j);
    if (here < offset && can_skip_i) {
      ++i;
    } else if (here > offset && can_skip_j) {
      ++j;
    } else if (can_pair) {
      anchors.emplace_back(i, j);
      offset = here;
      ++i;
      ++j;
    } else if (at(i + 1, j) >= at(i, j + 1)) {
      ++i;
    } else {
      ++j;
    }
  }
  // Between two pairs, runs of the same length on both sides are the same allocations in the same places, whatever
  // their sizes did (a size that grows faster than the batch is still that allocation; it fits neither).
  anchors.emplace_back(n, m);
  std::size_t next_i = 0;
  std::size_t next_j = 0;
  for (const auto& [anchor_i, anchor_j] : anchors) {
    if (anchor_i - next_i == anchor_j - next_j) {
      for (std::size_t k = 0; k < anchor_i - next_i; ++k) result[a[next_i + k]] = b[next_j + k];
    }
    if (anchor_i < n) result[a[anchor_i]] = b[anchor_j];
    next_i = anchor_i + 1;
    next_j = anchor_j + 1;
  }
}

}  // namespace

bool sizes_compatible(std::uint64_t bytes_from, std::uint64_t batch_from, std::uint64_t bytes_to,
                      std::uint64_t batch_to) {
  if (bytes_from == bytes_to) return true;
  if (batch_from == batch_to) return false;
  // Order by batch: the size at the larger batch must be at least the other, and at most batch ratio times it.
  const bool to_larger = batch_to > batch_from;
  const double small = static_cast<double>(to_larger ? bytes_from : bytes_to);
  const double large = static_cast<double>(to_larger ? bytes_to : bytes_from);
  const double ratio = static_cast<double>(to_larger ? batch_to : batch_from) /
                       static_cast<double>(to_larger ? batch_from : batch_to);
  if (large + static_cast<double>(kByteSlack) < small) return false;
  return large <= small * ratio * (1 + kRatioSlack) + static_cast<double>(kByteSlack);
}

std::vector<std::optional<std::uint32_t>> match_allocations(const MatchSide& from, const MatchSide& to) {
  Result result(from.sequence->allocations.size());
  const auto from_groups = groups_of(from);
  const auto to_groups = groups_of(to);
  for (const auto& [key, group] : from_groups) {
    const auto found = to_groups.find(key);
    if (found == to_groups.end()) continue;
    const Group& other = found->second;
    // Equal counts and sizes that agree almost everywhere: the same allocations in the same order, paired by
    // position even where a size grows faster than the batch (those then fit neither constant nor linear).
    std::size_t agreeing = 0;
    if (other.size() == group.size()) {
      for (std::size_t i = 0; i < group.size(); ++i) {
        if (sizes_compatible(from.sequence->allocations[group[i]].bytes, from.batch,
                             to.sequence->allocations[other[i]].bytes, to.batch)) {
          ++agreeing;
        }
      }
    }
    const bool paired = other.size() == group.size() &&
                        static_cast<double>(agreeing) >= kPositionalShare * static_cast<double>(group.size());
    if (paired) {
      for (std::size_t i = 0; i < group.size(); ++i) result[group[i]] = other[i];
    } else {
      pair_longest_common(from, group, to, other, result);
    }
  }
  return result;
}

}  // namespace plimsoll::plan
