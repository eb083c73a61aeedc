#pragma once
// The bytes of a GPU's ledger file (/dev/shm/plimsoll-ledger-<uuid>), shared by every governed process on that
// GPU through mmap. docs/sharing.md, "The ledger file", describes the format; bump kLedgerVersion on any change.
//
// Writers change entries and totals only while holding `mutex` (robust and process-shared: a holder that dies
// hands the next locker EOWNERDEAD, and it repairs the totals from the entries). Every mutable field is a
// lock-free atomic so that `plimsoll top`, which maps the file read-only and never locks, reads it without tearing;
// `sequence` is odd while a writer is inside, so a reader can tell a consistent copy (seqlock).
#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace plimsoll::sharing {

inline constexpr char kLedgerMagic[8] = {'P', 'L', 'M', 'L', 'E', 'D', 'G', 'R'};
inline constexpr std::uint32_t kLedgerVersion = 2;  // 2: pause/resume requests, pid namespaces
inline constexpr std::uint32_t kLedgerEntries = 64;  // processes sharing one GPU at most
inline constexpr std::size_t kUuidChars = 64;
inline constexpr std::size_t kCommandChars = 32;
inline constexpr std::size_t kControlMessageChars = 256;

/// Entry flags.
inline constexpr std::uint32_t kEntryCanTrim = 1;      // a plimsoll-engine process: gives cached memory back
inline constexpr std::uint32_t kEntryInterposed = 2;   // governed at the driver (libplimsoll_cuda_intercept.so)
inline constexpr std::uint32_t kEntryLivenessLock = 4; // holds its liveness lock on the file (ledger_file.hpp)
inline constexpr std::uint32_t kEntryPaused = 8;       // its devices are paused (`plimsoll pause`)

/// Pause and resume requests (`plimsoll pause PID`): `control_request` and `control_answer` hold
/// (sequence << 8) | kind and (sequence << 8) | status. A request is pending while the sequences differ; the process
/// writes `control_message`, then the answer.
enum class ControlKind : std::uint8_t { none = 0, pause = 1, pause_keeping_contents = 2, resume = 3 };
enum class ControlStatus : std::uint8_t { done = 0, failed = 1 };

struct LedgerEntry {
  std::atomic<std::int32_t> pid;            // 0: a free slot (written last on join, first on leave)
  std::atomic<std::uint32_t> flags;
  std::atomic<std::uint64_t> start_time;    // /proc/PID/stat field 22: tells a reused pid apart
  std::atomic<std::uint64_t> share;         // guaranteed bytes
  std::atomic<std::uint64_t> cap;           // at most this many, borrowing the rest while the GPU has room
  std::atomic<std::uint64_t> charged;       // what the process holds on the GPU (its context included)
  std::atomic<std::uint64_t> in_use;        // of which live allocations (engine processes; else == charged)
  std::atomic<std::uint64_t> peak;          // highest `charged`
  std::atomic<std::uint64_t> context;       // the CUDA context's measured cost, part of `charged`
  std::atomic<std::uint64_t> refusals;      // allocations refused
  std::atomic<std::uint64_t> trim_wanted;   // > 0: another process asked for this many bytes back
  std::atomic<std::uint64_t> trim_requests; // how often it was asked
  std::atomic<std::uint64_t> trims;         // how often it gave back
  std::atomic<std::uint64_t> command[kCommandChars / 8];  // the command name, NUL-padded
  std::atomic<std::uint64_t> pid_namespace; // inode of the process's /proc/self/ns/pid (0: unknown)
  std::atomic<std::uint64_t> control_request;
  std::atomic<std::uint64_t> control_answer;
  std::atomic<std::uint64_t> paused_bytes;  // what its pause gave back (kEntryPaused)
  std::atomic<std::uint64_t> control_message[kControlMessageChars / 8];  // the last answer, NUL-padded
};

struct LedgerHeader {
  // Fixed at creation (written before the file is linked under its name, never after).
  char magic[8];
  std::uint32_t version;
  std::uint32_t header_bytes;  // sizeof(LedgerHeader): a layout change shows here too
  std::uint32_t entry_bytes;   // sizeof(LedgerEntry)
  std::uint32_t entry_count;
  char uuid[kUuidChars];       // the GPU's UUID, NUL-padded
  std::uint64_t device_bytes;  // the GPU's memory
  std::uint64_t limit_bytes;   // no two processes together pass this
  std::uint64_t checksum;      // FNV-1a of the fields above: a damaged header is refused, not trusted
  // Changed under the mutex.
  pthread_mutex_t mutex;
  std::atomic<std::uint64_t> sequence;          // odd while a writer is inside
  std::atomic<std::uint64_t> repairs;           // times a dead holder's update was repaired
  std::atomic<std::uint64_t> reclaimed;         // entries of dead processes removed
  std::atomic<std::uint64_t> total_charged;     // sum of entries' charged
  std::atomic<std::uint64_t> total_shares;      // sum of entries' share
  std::atomic<std::uint64_t> total_committed;   // sum of max(charged, share): what shares plus borrowing hold
  std::atomic<std::uint64_t> trimmable_borrowed;// sum over can-trim entries of max(0, charged - share)
  // One process at a time creates its CUDA context and measures it, so that none counts another's new context
  // as its own: the holder of this token (0: nobody; a dead holder's token is taken over).
  std::atomic<std::int32_t> context_token_pid;
  std::atomic<std::uint64_t> context_token_start_time;
  // When a refusal last looked for dead processes (CLOCK_MONOTONIC ns, the same clock in every process): a job
  // refused over and over must not read /proc for every entry, under the lock, each time.
  std::atomic<std::uint64_t> last_reclaim_ns;
};

struct LedgerFileLayout {
  LedgerHeader header;
  LedgerEntry entries[kLedgerEntries];
};

static_assert(std::atomic<std::uint64_t>::is_always_lock_free && std::atomic<std::int32_t>::is_always_lock_free,
              "the ledger is shared between processes through lock-free atomics");
static_assert(sizeof(LedgerEntry) == 8 * 52);

/// FNV-1a of the header's fixed part.
std::uint64_t header_checksum(const LedgerHeader& header) noexcept;

}  // namespace plimsoll::sharing
