#pragma once
// The tag table's mutex beside fork() (engine/fork_handlers.hpp): intern_tag and tag_name take it, so a thread
// inside either at a fork would leave it held in the child, whose next tagged allocation would hang. A leaf: nothing
// is taken under it, so the preparation takes it last and the handlers after the fork release it first.
namespace plimsoll::engine {

/// Makes the table (at the handlers' installation: made inside fork() it would allocate there).
void make_tag_table_for_fork();
void lock_tag_table_for_fork() noexcept;
void unlock_tag_table_after_fork() noexcept;

/// A seam for tests: called with the table's mutex held when intern_tag meets a name it has not seen (its cold
/// path). nullptr: none.
void set_new_tag_seam(void (*seam)()) noexcept;

}  // namespace plimsoll::engine
