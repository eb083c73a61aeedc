#pragma once
// Whether a ledger entry's process still runs, judged the way that works from where the reader is: by pid and
// start time inside the same pid namespace, by the entry's liveness lock across namespaces (a container sharing
// the ledger directory sees other pids, or none). docs/sharing.md, "Processes in other pid namespaces".
#include <cstdint>

#include "sharing/ledger_file.hpp"

namespace plimsoll::sharing {

/// The inode of /proc/self/ns/pid, which names this process's pid namespace; 0 when it cannot be read.
std::uint64_t this_pid_namespace() noexcept;

/// False only when the process of entry `slot` is known to be gone: in the same namespace (or when either side's
/// namespace is unknown), its pid and start time no longer match a running process; in another namespace, its
/// liveness lock is no longer held. An entry from another namespace without a lock is never judged dead.
bool entry_alive(const LedgerFile& file, int slot, std::uint64_t reader_namespace);

}  // namespace plimsoll::sharing
