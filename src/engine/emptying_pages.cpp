#include "engine/emptying_pages.hpp"

#include <algorithm>
#include <iterator>
#include <utility>
#include <vector>

namespace plimsoll::engine {

EmptyingPages emptying_pages(const Heap& heap, const StepObservation& paired) {
  constexpr std::uint32_t kHeld = UINT32_MAX;  // the page holds something that is not freed in the next step
  // Heap::walk visits the reservation's blocks in address order, pages among them, before any page's own blocks.
  std::vector<std::pair<std::uint64_t, std::uint32_t>> pages;  // (address, last tick), by address
  std::vector<std::uint64_t> leftovers;
  // The page at or below addr. No bounds check: walk visits every page before any of its blocks, in address order,
  // so a small block's page is already in `pages` and is the last one at or below it; and a page is a live block
  // (Heap::deallocate returns a page to the large class when its last block goes), so none in `pages` is stale.
  const auto page_of = [&pages](std::uint64_t addr) {
    auto page = std::upper_bound(pages.begin(), pages.end(), addr,
                                 [](std::uint64_t a, const std::pair<std::uint64_t, std::uint32_t>& p) { return a < p.first; });
    return page == pages.begin() ? pages.end() : std::prev(page);
  };
  heap.walk([&](const BlockView& block) {
    if (block.free) return;
    if (block.page) {
      pages.emplace_back(block.addr, 0);
      return;
    }
    if (!block.small) return;
    auto page = page_of(block.addr);
    if (page == pages.end()) return;
    const auto found = paired.live.find(block.addr);
    if (found == paired.live.end()) {  // older than the step: stays
      page->second = kHeld;
      return;
    }
    const StepObservation::Request& request = paired.requests[found->second];
    if (request.growth || request.held_until >= paired.ticks) {  // kept, or not known to be freed
      page->second = kHeld;
      return;
    }
    page->second = std::max(page->second, request.held_until);
    leftovers.push_back(block.addr);
  });
  EmptyingPages result;
  for (const auto& [addr, until] : pages)
    if (until != kHeld) result.until.emplace(addr, until);
  // Only the leftovers of the pages kept: a page that holds anything else is not emptying.
  for (const std::uint64_t addr : leftovers) {
    const auto page = page_of(addr);
    if (page != pages.end() && page->second != kHeld) result.leftovers.insert(addr);
  }
  return result;
}

}  // namespace plimsoll::engine
