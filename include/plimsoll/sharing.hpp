#pragma once
// Several jobs on one GPU (docs/sharing.md): a share spec (`cuda:0=8GiB:16GiB`), the environment a child needs
// to run under it (the driver interposer preloaded, the budget variables), and the calls a process that owns a
// plimsoll Allocator makes to take part in a GPU's shared ledger and give cached memory back when asked.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "plimsoll/error.hpp"

namespace plimsoll {

class Allocator;

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

struct ShareHooks;

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
  /// Everything the ledger asks of this process (a trim, a pause or resume from `plimsoll pause`/`resume`), and
  /// its in-use bytes written; what TrimResponder calls every period. Cheap when nothing is asked (a few loads).
  void honour_requests(const ShareHooks& hooks);

  std::uint64_t share_bytes() const noexcept;
  std::uint64_t cap_bytes() const noexcept;
  std::uint64_t charged_bytes() const;

  struct Impl;
  Impl& impl() noexcept { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

/// What a governed process's allocator offers the ledger; a function left empty is not offered (a `pause` request
/// is then answered with an error saying so).
struct ShareHooks {
  std::function<void()> trim;                  // give cached memory back when another process asks (Allocator::trim)
  std::function<std::uint64_t()> in_use;       // live bytes, written to the ledger every period for `plimsoll top`
  std::function<std::uint64_t(bool keep_contents)> pause;  // for `plimsoll pause PID` (Allocator::pause); throws
  std::function<void()> resume;                // for `plimsoll resume PID` (Allocator::resume); throws
  // While paused, the bytes resume would map back; nullopt when not paused. Read every period, so the ledger's
  // paused flag stays true when the process pauses or resumes itself (not through `plimsoll pause`).
  std::function<std::optional<std::uint64_t>()> paused;
};
/// All five for one Allocator (which must outlive the responder using them).
ShareHooks allocator_hooks(Allocator& allocator);

/// A thread that answers the ledger within `period`: trims when another process asks for memory back, carries out
/// `plimsoll pause PID` / `plimsoll resume PID` requests and acknowledges them (with the error when one fails), and
/// keeps the entry's in-use bytes current (sampled every period: no ledger write per allocation).
class TrimResponder {
 public:
  TrimResponder(GpuShare& share, ShareHooks hooks, std::chrono::milliseconds period = std::chrono::milliseconds(20));
  /// Trims only.
  TrimResponder(GpuShare& share, std::function<void()> trim,
                std::chrono::milliseconds period = std::chrono::milliseconds(20));
  ~TrimResponder();
  TrimResponder(const TrimResponder&) = delete;
  TrimResponder& operator=(const TrimResponder&) = delete;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

/// What `plimsoll pause PID` / `plimsoll resume PID` did to one GPU's entry of the process.
struct ControlOutcome {
  std::string gpu_uuid;
  bool done = false;       // the process carried it out
  bool answered = true;    // false: it left before answering, or did not answer in time (the request was withdrawn)
  std::string message;     // what it did ("paused: 1.50 GiB given back"), or why not
};

/// Thrown when some GPU's request got no answer in time: what every GPU answered so far; the unanswered requests
/// were withdrawn, so no late pause happens unseen.
class ControlTimeout : public Error {
 public:
  ControlTimeout(const std::string& what, std::vector<ControlOutcome> outcomes)
      : Error(what), outcomes_(std::move(outcomes)) {}
  const std::vector<ControlOutcome>& outcomes() const noexcept { return outcomes_; }

 private:
  std::vector<ControlOutcome> outcomes_;
};

/// Asks the governed process `pid` (a pid of this pid namespace) to pause (or resume) its devices on every GPU whose
/// ledger holds it, and waits up to `timeout` for each acknowledgement. Every target is checked before any request
/// is posted. Throws InvalidArgument when no ledger in `ledger_dir` holds `pid` (not governed, not running, or only
/// in another pid namespace), when the process is governed at the driver (an interposed framework's memory is not
/// plimsoll's to unmap), and ControlTimeout when it does not answer in time.
std::vector<ControlOutcome> request_pause(int pid, bool keep_contents, std::chrono::milliseconds timeout,
                                          const std::string& ledger_dir = ledger_directory());
std::vector<ControlOutcome> request_resume(int pid, std::chrono::milliseconds timeout,
                                           const std::string& ledger_dir = ledger_directory());

}  // namespace plimsoll
