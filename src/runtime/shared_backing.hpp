#pragma once
// One physical device's backing shared by the logical devices carved out of it. Each logical device's
// Allocator owns a view; the views forward to the one backing, so the logical devices draw on the same
// physical capacity (two 3 GiB halves of an 8 GiB device really compete for its 8 GiB).
#include <memory>
#include <string>
#include <utility>

#include "backings/backing.hpp"
#include "backings/backing_adaptor.hpp"

namespace plimsoll::runtime {

/// Owns the physical backing. Must outlive every view made from it.
class SharedBacking {
 public:
  explicit SharedBacking(std::unique_ptr<backings::Backing> backing) : backing_(std::move(backing)) {}
  SharedBacking(const SharedBacking&) = delete;
  SharedBacking& operator=(const SharedBacking&) = delete;

  /// A non-owning Backing for one logical device's Allocator. Logical devices are independent Allocators used
  /// from any thread; the shared backing's own lock serializes their calls (backings/backing.hpp), and each
  /// view's books hold only its own device's reservations, so one logical device cannot unmap another's memory.
  std::unique_ptr<backings::Backing> view();

 private:
  std::unique_ptr<backings::Backing> backing_;
};

class SharedBackingView final : public backings::BackingAdaptor {
 public:
  explicit SharedBackingView(backings::Backing& shared) : BackingAdaptor("shared (logical device)", shared) {}

 private:
  std::string do_describe() const override { return upstream().describe() + " (shared by logical devices)"; }
};

inline std::unique_ptr<backings::Backing> SharedBacking::view() {
  return std::make_unique<SharedBackingView>(*backing_);
}

}  // namespace plimsoll::runtime
