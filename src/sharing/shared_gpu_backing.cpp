// A backing over an upstream one whose maps are charged to the process's GPU share.
#include <fmt/format.h>

#include "backings/backing_adaptor.hpp"
#include "sharing/gpu_share.hpp"
#include "sharing/settings.hpp"

namespace plimsoll {

namespace {

class SharedGpuBacking final : public backings::OwningBackingAdaptor {
 public:
  SharedGpuBacking(GpuShare& share, std::unique_ptr<backings::Backing> upstream)
      : OwningBackingAdaptor("shared GPU", std::move(upstream)), share_(share) {}

 private:
  bool do_map(std::uintptr_t addr, std::uint64_t bytes) override {
    auto& impl = share_.impl();
    // The ledger first: a refused charge is a refused map, and the heap then gives its cache back and retries.
    if (sharing::charge_waiting_for_trims(impl.ledger, impl.slot, bytes, sharing::trim_wait()).verdict !=
        sharing::Verdict::admitted)
      return false;
    if (upstream().map(addr, bytes)) return true;
    impl.ledger.release(impl.slot, bytes);
    return false;
  }
  void do_unmap(std::uintptr_t addr, std::uint64_t bytes) noexcept override {
    upstream().unmap(addr, bytes);
    share_.impl().ledger.release(share_.impl().slot, bytes);
  }
  backings::BackingMemory do_memory() const override {
    // The device as this process may use it: its cap, and what it could still be charged.
    backings::BackingMemory memory = upstream().memory();
    auto& impl = share_.impl();
    const std::uint64_t room = impl.ledger.headroom(impl.slot);
    memory.total_bytes = std::min(memory.total_bytes, impl.cap);
    memory.free_bytes = std::min(memory.free_bytes, room);
    return memory;
  }
  std::string do_describe() const override {
    return fmt::format("{} (shared GPU: share {} bytes, cap {} bytes)", upstream().describe(), share_.share_bytes(),
                       share_.cap_bytes());
  }

  GpuShare& share_;
};

}  // namespace

std::unique_ptr<backings::Backing> make_shared_gpu_backing(GpuShare& share,
                                                           std::unique_ptr<backings::Backing> upstream) {
  return std::make_unique<SharedGpuBacking>(share, std::move(upstream));
}

}  // namespace plimsoll
