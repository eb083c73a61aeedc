#pragma once
// The id map the trace readers share.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace plimsoll::telemetry {

// Trace ids (counters, addresses, hashes) -> dense slots, by open addressing: a probe touches one flat cell (id and
// slot side by side, one cache miss) instead of a heap node per id, which keeps a 10M-event trace with scattered
// ids loading in about a second. Ids are never removed: a freed id stays known, so a reader can report reuse or,
// in formats where addresses come back, point the id at its new slot. Id 0 is never a valid id, so it marks
// empty cells.
class SparseIdMap {
 public:
  static constexpr std::uint32_t kAbsent = std::numeric_limits<std::uint32_t>::max();

  std::uint32_t find(std::uint64_t id) const {
    if (cells_.empty()) return kAbsent;
    for (std::size_t index = home(id);; index = (index + 1) & mask()) {
      const Cell& cell = cells_[index];
      if (cell.id == id) return cell.slot;
      if (cell.id == 0) return kAbsent;
    }
  }

  // `id` must be present.
  void reassign(std::uint64_t id, std::uint32_t slot) {
    std::size_t index = home(id);
    while (cells_[index].id != id) index = (index + 1) & mask();
    cells_[index].slot = slot;
  }

  // `id` must not be present.
  void insert(std::uint64_t id, std::uint32_t slot) {
    // Grow at 5/8 full: linear probing stays short up to there.
    if (8 * (size_ + 1) > 5 * cells_.size()) grow();
    place(id, slot);
    ++size_;
  }

 private:
  struct Cell {
    std::uint64_t id = 0;
    std::uint32_t slot = 0;
  };

  std::size_t mask() const { return cells_.size() - 1; }

  std::size_t home(std::uint64_t id) const {
    // splitmix64's finalizer: ids in arithmetic progressions (strided addresses) spread over all cells.
    id ^= id >> 30;
    id *= 0xbf58476d1ce4e5b9ULL;
    id ^= id >> 27;
    id *= 0x94d049bb133111ebULL;
    id ^= id >> 31;
    return static_cast<std::size_t>(id) & mask();
  }

  void place(std::uint64_t id, std::uint32_t slot) {
    std::size_t index = home(id);
    while (cells_[index].id != 0) index = (index + 1) & mask();
    cells_[index] = Cell{id, slot};
  }

  void grow() {
    std::vector<Cell> old_cells(std::max<std::size_t>(64, 2 * cells_.size()));
    old_cells.swap(cells_);
    for (const Cell& cell : old_cells) {
      if (cell.id != 0) place(cell.id, cell.slot);
    }
  }

  std::vector<Cell> cells_;
  std::size_t size_ = 0;
};

}  // namespace plimsoll::telemetry
