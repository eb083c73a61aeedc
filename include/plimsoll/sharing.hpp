#pragma once
// Several jobs on one GPU (docs/sharing.md): a share spec (`cuda:0=8GiB:16GiB`), the environment a child needs
// to run under it (the driver interposer preloaded, the budget variables), and the calls a process that owns a
// plimsoll Allocator makes to take part in a GPU's shared ledger and give cached memory back when asked.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace plimsoll {

namespace backings { class Backing; }

/// How much of one GPU a process gets: `share` bytes are guaranteed; it may borrow up to `cap` while the GPU has
/// room. Sizes ("8GiB") or percentages of the GPU's memory ("25%"); a percentage resolves when the process joins.
struct ShareSpec {
  int device = 0;                  // cuda:N, the driver's ordinal N in the governed process
  std::string share;               // as written: "8GiB" or "25%"
  std::string cap;                 // as written; empty: the cap is the share (no borrowing)
  /// "cuda:0=8GiB:16GiB", the form parse_share_spec reads.
  std::string str() const;
  /// The share and cap in bytes on a GPU of `device_bytes`. Throws InvalidArgument when the cap is below the
  /// share or either exceeds the GPU.
  std::pair<std::uint64_t, std::uint64_t> resolve(std::uint64_t device_bytes) const;
};

/// Parses `cuda:N=SHARE[:CAP]`. Throws InvalidArgument naming the accepted form.
ShareSpec parse_share_spec(std::string_view text);
/// A comma-separated list (one spec per GPU), as PLIMSOLL_SHARE holds it. Throws on a GPU named twice.
std::vector<ShareSpec> parse_share_specs(std::string_view text);

/// The variables the governed child needs, in the order to set them: LD_PRELOAD (the interposer first, then what
/// `current_ld_preload` already held), PLIMSOLL_SHARE, and PLIMSOLL_LEDGER_DIR when `ledger_dir` is not empty.
/// `interceptor` empty: default_interceptor_path().
std::vector<std::pair<std::string, std::string>> sharing_environment(const std::vector<ShareSpec>& specs,
                                                                     std::string_view current_ld_preload = {},
                                                                     std::string_view ledger_dir = {},
                                                                     std::string interceptor = {});
/// Where libplimsoll_cuda_intercept.so is: $PLIMSOLL_CUDA_INTERCEPT if set, else the build tree's copy when it
/// exists, else the installed one. Throws InvalidArgument when none exists, saying how to point at it.
std::string default_interceptor_path();

/// The ledger directory: $PLIMSOLL_LEDGER_DIR, else /dev/shm.
std::string ledger_directory();

/// A process's place in a GPU's ledger, for a process whose allocator is plimsoll's (it can give cached memory
/// back, so it may borrow other processes' unused shares). Leaves the ledger when destroyed.
class GpuShare {
 public:
  /// Joins the ledger of the GPU with this UUID ("GPU-..."), creating it for a GPU of `device_bytes` when it does
  /// not exist. Throws plimsoll::Error when the shares would pass the GPU, or the ledger file is unusable.
  GpuShare(const std::string& gpu_uuid, std::uint64_t device_bytes, const ShareSpec& spec,
           const std::string& ledger_dir = ledger_directory());
  ~GpuShare();
  GpuShare(const GpuShare&) = delete;
  GpuShare& operator=(const GpuShare&) = delete;

  /// Whether another process, refused under its share, asked this one to give memory back (one atomic load).
  bool trim_requested() const noexcept;
  /// Calls `trim` if a request is pending, then clears it. For the allocation path: "at its next allocation".
  void honour_trim_request(const std::function<void()>& trim);

  std::uint64_t share_bytes() const noexcept;
  std::uint64_t cap_bytes() const noexcept;
  std::uint64_t charged_bytes() const;

  struct Impl;
  Impl& impl() noexcept { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

/// A backing adaptor: every map() is charged to the process's share (refused when the ledger refuses, so the heap
/// releases its cache and reports OutOfMemory), every unmap() credited. Build an Allocator over it.
std::unique_ptr<backings::Backing> make_shared_gpu_backing(GpuShare& share, std::unique_ptr<backings::Backing> upstream);

/// A thread that answers trim requests within `period`: it calls `trim` (an Allocator's trim()) when asked.
class TrimResponder {
 public:
  TrimResponder(GpuShare& share, std::function<void()> trim,
                std::chrono::milliseconds period = std::chrono::milliseconds(20));
  ~TrimResponder();
  TrimResponder(const TrimResponder&) = delete;
  TrimResponder& operator=(const TrimResponder&) = delete;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace plimsoll
