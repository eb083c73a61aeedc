#pragma once
// A GPU shared with other processes through its ledger (docs/sharing.md, "Runtime devices in the ledger"): when
// PLIMSOLL_SHARE (Config::gpu_shares) names a GPU, the runtime's devices on it take part as one plimsoll-engine
// process: one ledger entry per process and GPU (its logical devices share it), every map of the GPU's backing
// charged to it, and one TrimResponder answering the ledger (trims, `plimsoll pause PID` / `resume PID`, in-use
// bytes) for all the runtime's allocators on the GPU.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backings/backing.hpp"
#include "plimsoll/allocator.hpp"
#include "plimsoll/sharing.hpp"
#include "runtime/allocator_group.hpp"
#include "runtime/budget.hpp"
#include "runtime/physical_device.hpp"

namespace plimsoll::runtime {

/// The share `specs` give the GPU with this driver ordinal (PLIMSOLL_SHARE's cuda:N is the driver's N), or none.
std::optional<ShareSpec> share_for(const std::vector<ShareSpec>& specs, int driver_ordinal);

/// `physical` as its devices would be planned under `spec` before its GPU's ledger is joined (listing must not take
/// a share): the interposer's view (sharing/share_view.hpp) with the cap taken as what the ledger would charge
/// (never more than the driver's free; the others' shares are not read, so joining may give less). The budget
/// rules (budget.hpp) then apply unchanged. Throws InvalidArgument, naming the device and share, for a cap the GPU
/// cannot hold.
PhysicalDevice planned_under_share(PhysicalDevice physical, const ShareSpec& spec);

/// "cuda:0 cannot join its GPU's shared ledger as cuda:0=8GiB (PLIMSOLL_SHARE): ", before the ledger's own reason.
std::string share_refusal_prefix(const std::string& device, const ShareSpec& spec);

class GpuSharing {
 public:
  /// Joins the ledger of the GPU `uuid` (of `device_bytes`) in `ledger_dir`. Throws plimsoll::Error as GpuShare does
  /// (the shares do not fit, the ledger file is unusable), the message naming the device. `group_lock`: the lock of
  /// the GPU's allocator group (AllocatorGroup), registered by its owner and outliving this object.
  GpuSharing(const std::string& device, const std::string& uuid, std::uint64_t device_bytes, const ShareSpec& spec,
             const std::string& ledger_dir, engine::OuterForkLock& group_lock);
  ~GpuSharing();
  GpuSharing(const GpuSharing&) = delete;
  GpuSharing& operator=(const GpuSharing&) = delete;

  /// The GPU as this process may use it, as the interposer answers cuMemGetInfo: its total and ceiling are the cap,
  /// its free memory what the ledger would charge this process when it joined (never more than the driver's free
  /// at the scan; fixed then, as the scan is, so every device of the GPU is planned against the same numbers). The
  /// budget rules (budget.hpp) then apply unchanged.
  PhysicalMemory as_seen(PhysicalMemory memory) const;
  /// `upstream` with every map charged to the share and every unmap credited.
  std::unique_ptr<backings::Backing> charged(std::unique_ptr<backings::Backing> upstream);
  /// One more allocator on this GPU for the ledger's requests; the responder starts with the first.
  void add(Allocator& allocator);
  /// Stops answering the ledger: before the allocators are destroyed.
  void stop() noexcept;

 private:
  std::unique_ptr<GpuShare> share_;
  std::uint64_t headroom_at_join_ = 0;
  int joined_by_ = 0;  // the pid that joined: a forked child's copy leaves the parent's entry and thread alone
  AllocatorGroup group_;
  std::unique_ptr<TrimResponder> responder_;
};

}  // namespace plimsoll::runtime
