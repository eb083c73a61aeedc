#pragma once
// One physical device's backing shared by the logical devices carved out of it. Each logical device's
// Allocator owns a view; the views forward to the one backing, so the logical devices draw on the same
// physical capacity (two 3 GiB halves of an 8 GiB device really compete for its 8 GiB).
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "backings/backing.hpp"

namespace plimsoll::runtime {

/// Owns the physical backing. Must outlive every view made from it.
class SharedBacking {
 public:
  explicit SharedBacking(std::unique_ptr<backings::Backing> backing) : backing_(std::move(backing)) {}
  SharedBacking(const SharedBacking&) = delete;
  SharedBacking& operator=(const SharedBacking&) = delete;

  /// A non-owning Backing for one logical device's Allocator.
  std::unique_ptr<backings::Backing> view();

 private:
  friend class SharedBackingView;
  // Logical devices are independent Allocators, each with its own lock, used from any thread; backings are
  // written for one engine at a time, so calls from different views are serialized here.
  std::mutex mutex_;
  std::unique_ptr<backings::Backing> backing_;
};

class SharedBackingView final : public backings::Backing {
 public:
  explicit SharedBackingView(SharedBacking& shared) : shared_(shared) {}

  std::uintptr_t reserve(std::uint64_t bytes) override {
    std::lock_guard lock(shared_.mutex_);
    return shared_.backing_->reserve(bytes);
  }
  void unreserve(std::uintptr_t base, std::uint64_t bytes) noexcept override {
    std::lock_guard lock(shared_.mutex_);
    shared_.backing_->unreserve(base, bytes);
  }
  bool map(std::uintptr_t addr, std::uint64_t bytes) override {
    std::lock_guard lock(shared_.mutex_);
    return shared_.backing_->map(addr, bytes);
  }
  void unmap(std::uintptr_t addr, std::uint64_t bytes) noexcept override {
    std::lock_guard lock(shared_.mutex_);
    shared_.backing_->unmap(addr, bytes);
  }
  // Fixed at construction in every backing: no lock needed, and noexcept could not hold one anyway.
  std::uint64_t granularity() const noexcept override { return shared_.backing_->granularity(); }
  backings::BackingMemory memory() const override {
    std::lock_guard lock(shared_.mutex_);
    return shared_.backing_->memory();
  }
  backings::HostPages host_pages() const override {
    std::lock_guard lock(shared_.mutex_);
    return shared_.backing_->host_pages();
  }
  bool touchable() const noexcept override { return shared_.backing_->touchable(); }
  // The events object is thread-safe on its own and fixed at construction.
  backings::StreamEvents* stream_events() noexcept override { return shared_.backing_->stream_events(); }
  std::string describe() const override {
    std::lock_guard lock(shared_.mutex_);
    return shared_.backing_->describe() + " (shared by logical devices)";
  }

 private:
  SharedBacking& shared_;
};

inline std::unique_ptr<backings::Backing> SharedBacking::view() {
  return std::make_unique<SharedBackingView>(*this);
}

}  // namespace plimsoll::runtime
