#pragma once
// Run plans: where every request of a run, from its first event through step N, goes, packed offline from a trace
// of an earlier run of the same job (docs/engine.md, "Run plans"). A job that restarts (after a crash or
// preemption), a sweep, the same script on a new node: each repeats its allocations request for request through
// its first steps, so a plan packed knowing that whole run, lifetimes included, can hold it within a limit that
// online placement (best fit, then step plans from step 1 on) cannot.
//
// Invariants of a RunPlan:
//  - granule is a power of two; every entry's offset is a multiple of 256 (the heap's alignment) and its size is
//    a rounded size (Heap::round) above 0;
//  - offsets are from the heap's base: the follower places request i at base + entries[i].offset;
//  - entries are in request order (the run's allocations in event order, frees not listed: they need no plan);
//  - entries whose lifetimes meet never share a byte (the packer's guarantee, checked by tests, not by the reader:
//    safety never rests on it, since Heap::allocate_at places only inside one free block);
//  - covered_granules is the count of granules the entries cover, united: what following the plan maps;
//  - fingerprint holds the rounded sizes of the first kFingerprint requests (fewer when the run has fewer): a plan
//    whose fingerprint does not match the run's first requests belongs to another job.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace plimsoll::engine {

struct RunPlan {
  static constexpr std::size_t kFingerprint = 64;
  static constexpr int kFormatVersion = 1;

  struct Entry {
    std::uint64_t size = 0;    // rounded bytes (Heap::round)
    std::uint64_t offset = 0;  // from the heap's base
    bool operator==(const Entry&) const = default;
  };

  std::uint64_t granule = 2ull << 20;  // the device's mapping granule the plan was packed for
  std::uint64_t limit = 0;             // the limit (bytes) it was packed against; 0: none
  std::uint64_t covered_granules = 0;  // what following it maps
  std::size_t through_step = 0;        // the plan covers the run's events through this step (trace.steps index;
                                       // packed from a whole trace: its last step, the teardown included)
  std::string source;                  // what it was packed from (the trace's path), for messages
  std::vector<std::uint64_t> fingerprint;
  std::vector<Entry> entries;

  bool operator==(const RunPlan&) const = default;
};

/// The granules (`granule` bytes, counted from the heap's base) that the entries cover, united: what
/// covered_granules must hold.
std::uint64_t count_covered_granules(const std::vector<RunPlan::Entry>& entries, std::uint64_t granule);

/// Reads a run plan written by write_run_plan. Throws plimsoll::InvalidArgument naming the file, what is wrong
/// (not a run plan, another format version, an entry breaking an invariant above) and the fix (pack it again with
/// `plimsoll run-plan`).
RunPlan read_run_plan(const std::string& path);

/// Writes the plan to `path` (replaced whole: written to a temporary file beside it, then renamed). Throws
/// plimsoll::Error naming the path when it cannot be written.
void write_run_plan(const RunPlan& plan, const std::string& path);

/// write_run_plan, then read_run_plan of what was written, compared with `plan`: a plan on disk that a follower
/// would read differently is never left behind silently. Throws plimsoll::Error naming the path when they differ
/// (or as the two calls do).
void save_run_plan(const RunPlan& plan, const std::string& path);

}  // namespace plimsoll::engine
