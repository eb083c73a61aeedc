#include "runtime/gpu_sharing.hpp"

#include <algorithm>

#include <unistd.h>

#include <fmt/format.h>

#include "plimsoll/error.hpp"
#include "sharing/gpu_share.hpp"
#include "sharing/share_view.hpp"
#include "sharing/shared_gpu_backing.hpp"

namespace plimsoll::runtime {
namespace {

// `memory` under the share's view (sharing/share_view.hpp); the most the process can ever get is what it is shown.
PhysicalMemory seen_under_share(PhysicalMemory memory, std::uint64_t cap, std::uint64_t headroom) {
  const sharing::GpuMemoryView seen = sharing::seen_under_share(
      {.free_bytes = memory.free_bytes, .total_bytes = memory.total_bytes}, cap, headroom);
  memory.free_bytes = seen.free_bytes;
  memory.total_bytes = seen.total_bytes;
  memory.ceiling_bytes = std::min(memory.ceiling_bytes, seen.total_bytes);
  return memory;
}

}  // namespace

std::optional<ShareSpec> share_for(const std::vector<ShareSpec>& specs, int driver_ordinal) {
  const auto found =
      std::find_if(specs.begin(), specs.end(), [&](const ShareSpec& spec) { return spec.device == driver_ordinal; });
  if (found == specs.end()) return std::nullopt;
  return *found;
}

std::string share_refusal_prefix(const std::string& device, const ShareSpec& spec) {
  return fmt::format("{} cannot join its GPU's shared ledger as {} (PLIMSOLL_SHARE): ", device, spec.str());
}

PhysicalDevice planned_under_share(PhysicalDevice physical, const ShareSpec& spec) {
  std::uint64_t cap = 0;
  try {
    cap = spec.resolve(physical.memory.total_bytes).second;
  } catch (const InvalidArgument& error) {
    throw InvalidArgument(share_refusal_prefix(physical.name.str(), spec) + error.what());
  }
  physical.memory = seen_under_share(physical.memory, cap, cap);
  return physical;
}

GpuSharing::GpuSharing(const std::string& device, const std::string& uuid, std::uint64_t device_bytes,
                       const ShareSpec& spec, const std::string& ledger_dir, engine::OuterForkLock& group_lock)
    : group_(group_lock) {
  // The ledger's own message says what is wrong and how to fix it; the prefix says which device and share met it.
  const auto context = [&] { return share_refusal_prefix(device, spec); };
  try {
    share_ = std::make_unique<GpuShare>(uuid, device_bytes, spec, ledger_dir);
  } catch (const InvalidArgument& error) {
    throw InvalidArgument(context() + error.what());
  } catch (const DeviceUnavailable& error) {
    throw DeviceUnavailable(context() + error.what());
  } catch (const InvalidState& error) {
    throw InvalidState(context() + error.what());
  } catch (const Error& error) {
    throw Error(context() + error.what());
  }
  joined_by_ = ::getpid();
  auto& impl = share_->impl();
  headroom_at_join_ = impl.ledger.headroom(impl.slot);
}

GpuSharing::~GpuSharing() {
  stop();
  // A forked child (CUDA does not follow a fork) destroying its copy must not take the parent's entry out.
  if (::getpid() != joined_by_) static_cast<void>(share_.release());
}

PhysicalMemory GpuSharing::as_seen(PhysicalMemory memory) const {
  return seen_under_share(memory, share_->cap_bytes(), headroom_at_join_);
}

std::unique_ptr<backings::Backing> GpuSharing::charged(std::unique_ptr<backings::Backing> upstream) {
  return make_shared_gpu_backing(*share_, std::move(upstream));
}

void GpuSharing::add(Allocator& allocator) {
  group_.add(allocator);
  if (!responder_) responder_ = std::make_unique<TrimResponder>(*share_, group_.hooks());
}

void GpuSharing::stop() noexcept {
  // In a forked child the responder's thread does not exist: joining it would wait for ever.
  if (::getpid() != joined_by_) static_cast<void>(responder_.release());
  responder_.reset();
}

}  // namespace plimsoll::runtime
