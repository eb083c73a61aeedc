#pragma once
// Call sites of recorded allocations. Capturing is on the recording hot path, so it only walks the stack and
// interns the return addresses: each distinct stack is stored once and named by a dense id. Symbolizing (the
// costly part: reading symbol tables and DWARF) waits until someone asks for a name, usually once at the end of
// a recording.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "plimsoll/site_source.hpp"
#include "telemetry/recording/call_site_symbolizer.hpp"

namespace plimsoll::telemetry {

/// The distinct stacks captured so far. Thread-safe: capture() from any number of threads, and describe() and
/// friends at any time alongside.
class CallSites {
 public:
  /// Frames kept per stack, the innermost ones. Deep enough to climb out of plimsoll, c10 and libtorch from
  /// an allocator hook; a stack still inside them after this many frames has no call site.
  static constexpr std::uint32_t kMaxFrames = 32;
  /// Past this many distinct stacks capture() returns 0 (no call site), so a program whose stacks never repeat
  /// (deep recursion, JIT code) cannot grow the table without bound. About 300 bytes a stack.
  static constexpr std::size_t kDefaultMaxStacks = std::size_t{1} << 20;

  explicit CallSites(std::size_t max_stacks = kDefaultMaxStacks);
  ~CallSites();
  CallSites(const CallSites&) = delete;
  CallSites& operator=(const CallSites&) = delete;

  /// The id (1..size()) of the calling stack: the caller of capture() and its callers, after dropping `skip`
  /// more innermost frames. The same stack always gets the same id. 0 when no stack could be walked or the
  /// table is full. Costs a stack walk (about 150 ns a frame); allocates only for a stack not seen before.
  /// When an interpreter site source is installed (set_interpreter_site_source) and names a frame of this
  /// thread, the id is that frame's instead, with no stack walk.
  /// Must not be inlined, or its own frame would be the caller's.
  [[gnu::noinline]] std::uint32_t capture(int skip = 0);

  /// Distinct stacks captured so far: ids run from 1 to size().
  std::size_t size() const;

  /// fork(): both locks, held across it by the engine's handlers (through the recording), so the child inherits
  /// neither from a thread that does not exist there. Never nested elsewhere, so any order is safe.
  void lock_for_fork() noexcept;
  void unlock_after_fork() noexcept;

  /// The return addresses of stack `id`, innermost first. Empty for 0; InvalidArgument for an id that
  /// capture() never returned.
  std::vector<std::uintptr_t> frames(std::uint32_t id) const;

  /// The call site of stack `id`: its first frame outside plimsoll, libtorch and c10, as
  /// "function (file:line)" (format_site_frame). "" for 0 and for a stack with no frame outside them.
  std::string describe(std::uint32_t id);

  /// The name an interpreter site source gave stack `id` ("train.py:42"); "" for a native stack or 0.
  std::string interpreter_name(std::uint32_t id) const;

  /// Every frame of stack `id`, symbolized, innermost first (for snapshots that show the whole stack).
  std::vector<SiteFrame> stack(std::uint32_t id);

  /// describe() of every id, indexed by id; [0] is "" (unknown), as in Trace::sites.
  std::vector<std::string> symbolize_all();

 private:
  struct Stack;
  struct Table;

  static const Stack* find(const Table& table, std::uint64_t hash, const std::uintptr_t* frames,
                           std::uint32_t depth) noexcept;
  std::uint32_t insert(std::uint64_t hash, const std::uintptr_t* frames, std::uint32_t depth,
                       const std::function<std::string()>& interpreter_name);
  std::uint32_t capture_interpreter(const InterpreterSiteSource& source, const InterpreterFrame& frame);
  static bool is_interpreter(const Stack& stack);
  Table& grow_table();
  const Stack& stack_of(std::uint32_t id) const;  // caller holds insert_mutex_
  std::string describe_locked(const Stack& stack);  // caller holds symbolize_mutex_
  CallSiteSymbolizer& symbolizer();                 // caller holds symbolize_mutex_

  const std::size_t max_stacks_;
  // Lookups of known stacks read the current table without a lock. A new stack is added under insert_mutex_;
  // growing publishes a bigger table and keeps the old ones alive (readers may still be probing them) until
  // the CallSites goes: at most as much memory again as the current table.
  std::atomic<Table*> table_{nullptr};
  mutable std::mutex insert_mutex_;
  std::vector<std::unique_ptr<Table>> tables_;   // every table made, the current one last
  std::vector<std::unique_ptr<Stack>> stacks_;  // by id - 1
  // Symbolizing is slow and libdw is not thread-safe: its own lock, so captures never wait for it.
  std::mutex symbolize_mutex_;
  std::unique_ptr<CallSiteSymbolizer> symbolizer_;  // made on first use
};

}  // namespace plimsoll::telemetry
