// A backing over an upstream one whose maps are charged to the process's GPU share.
#include "sharing/shared_gpu_backing.hpp"

#include <algorithm>
#include <chrono>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "backings/backing_adaptor.hpp"
#include "sharing/gpu_share.hpp"
#include "sharing/settings.hpp"

namespace plimsoll {

namespace {

// Per thread: an allocation runs on one thread, from its first refused map to the allocator's wait and retry.
thread_local bool t_trims_asked = false;       // this thread's last refusal asked borrowers to give memory back
thread_local std::uint64_t t_refused_bytes = 0;
thread_local bool t_count_next_refusal = false;  // the retry after a wait: its refusal is the one counted

class SharedGpuBacking final : public backings::OwningBackingAdaptor {
 public:
  SharedGpuBacking(GpuShare& share, std::unique_ptr<backings::Backing> upstream)
      : OwningBackingAdaptor("shared GPU", std::move(upstream)), share_(share) {}

 private:
  bool do_map(std::uintptr_t addr, std::uint64_t bytes) override {
    auto& impl = share_.impl();
    // The ledger first: a refused charge is a refused map, and the heap then gives its cache back and retries.
    // Never waits here (the allocator's lock is held): a refusal that asked for trims is waited for in
    // wait_for_memory(), without the lock.
    const bool count = std::exchange(t_count_next_refusal, false);
    const sharing::ChargeResult result = impl.ledger.charge(impl.slot, bytes, count);
    if (result.verdict != sharing::Verdict::admitted) {
      t_trims_asked = result.verdict == sharing::Verdict::needs_trim;
      t_refused_bytes = bytes;
      return false;
    }
    if (upstream().map(addr, bytes)) return true;
    impl.ledger.release(impl.slot, bytes);
    return false;
  }
  void do_unmap(std::uintptr_t addr, std::uint64_t bytes) noexcept override {
    upstream().unmap(addr, bytes);
    share_.impl().ledger.release(share_.impl().slot, bytes);
  }

  bool do_can_wait_for_memory() const noexcept override { return true; }
  // The borrowers asked trim at their next allocation or within their responder's period: wait until the room
  // is there or PLIMSOLL_SHARE_TRIM_WAIT_MS passed, polling the ledger every millisecond.
  void do_wait_for_memory() noexcept override {
    t_count_next_refusal = true;
    if (!std::exchange(t_trims_asked, false)) return;
    auto& impl = share_.impl();
    const auto deadline = std::chrono::steady_clock::now() + sharing::trim_wait();
    try {
      while (std::chrono::steady_clock::now() < deadline && impl.ledger.headroom(impl.slot) < t_refused_bytes)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    } catch (...) {
      // An unusable ledger lock: the retry's charge reports it as a refusal.
    }
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
