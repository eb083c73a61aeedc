#pragma once
// A vector with room made ahead: code that must not fail half-way (a noexcept path, or a change that has to finish
// once begun) makes room for its insertions first, where a std::bad_alloc still leaves everything as it was, and
// then inserts without allocating. Growth is geometric (8 at first, then at least double), so a list that grows by
// one per call reallocates O(log n) times: reserve(size() + 1) would copy the whole list on every call.
#include <algorithm>
#include <cstddef>
#include <type_traits>
#include <vector>

namespace plimsoll::util {

/// Capacity for at least `count` elements, growing geometrically. Throws std::bad_alloc (or length_error) with
/// `list` unchanged.
template <class T, class Alloc>
void reserve_ahead(std::vector<T, Alloc>& list, std::size_t count) {
  static_assert(std::is_nothrow_move_constructible_v<T> || std::is_copy_constructible_v<T>,
                "reserve_ahead keeps `list` unchanged on failure only for elements that move without throwing or "
                "can be copied");
  if (list.capacity() >= count) return;
  list.reserve(std::max({std::size_t{8}, 2 * list.capacity(), count}));
}

/// Room for `more` elements beyond size(): the next `more` insertions (push_back, emplace_back, insert of one)
/// allocate nothing. An insertion at the end keeps every iterator valid; one in the middle still invalidates those
/// from its position on (the elements after it move). Throws std::bad_alloc with `list` unchanged: the strong
/// guarantee needs elements that move without throwing or can be copied (std::vector's reserve then rolls back).
template <class T, class Alloc>
void make_room_for(std::vector<T, Alloc>& list, std::size_t more = 1) {
  reserve_ahead(list, list.size() + more);
}

}  // namespace plimsoll::util
