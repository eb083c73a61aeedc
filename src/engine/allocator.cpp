// plimsoll::Allocator: the lock, tags, stats and OOM reports around one engine::Heap.
#include "plimsoll/allocator.hpp"

#include <algorithm>
#include <array>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <vector>

#include "backings/backing.hpp"
#include "engine/heap.hpp"
#include "engine/spin_lock.hpp"
#include "plimsoll/size.hpp"

namespace plimsoll {

namespace {
engine::HeapOptions heap_options(const DeviceDescription& description) {
  engine::HeapOptions options;
  options.limit = description.limit_bytes;
  options.preallocate = description.policy.growth == Growth::preallocate;
  if (description.policy.release_threshold) options.release_threshold = *description.policy.release_threshold;
  return options;
}

std::string hex(std::uint64_t addr) {
  char text[32];
  std::snprintf(text, sizeof text, "0x%" PRIx64, addr);
  return text;
}
}  // namespace

struct Allocator::Impl {
  struct TagCounter {
    std::uint64_t in_use = 0, peak = 0, live = 0;
  };
  // The last frees, consulted only to explain a bad free ("freed already, tag ...").
  struct RecentFree {
    std::uint64_t addr = 0, size = 0;
    Tag tag = 0;
  };
  static constexpr std::size_t kRecentFrees = 256;

  DeviceDescription description;
  std::unique_ptr<backings::Backing> backing;
  std::unique_ptr<engine::Heap> heap;
  mutable engine::SpinLock lock;
  std::vector<TagCounter> tags;
  std::array<RecentFree, kRecentFrees> recent{};
  std::size_t recent_next = 0;
  std::uint64_t ooms = 0;

  std::uint64_t allocate(std::size_t bytes, Tag tag) {
    std::uint64_t addr = heap->allocate(bytes, tag);
    if (addr == 0) {
      ++ooms;
      return 0;
    }
    if (tag >= tags.size()) tags.resize(static_cast<std::size_t>(tag) + 1);
    TagCounter& counter = tags[tag];
    counter.in_use += engine::Heap::round(bytes);
    counter.peak = std::max(counter.peak, counter.in_use);
    ++counter.live;
    return addr;
  }

  std::vector<TagStats> tag_stats() const {
    std::vector<TagStats> out;
    for (std::size_t i = 0; i < tags.size(); ++i) {
      if (tags[i].peak == 0) continue;
      out.push_back(TagStats{std::string(i == 0 ? "untagged" : tag_name(static_cast<Tag>(i))), tags[i].in_use,
                             tags[i].peak, tags[i].live});
    }
    std::sort(out.begin(), out.end(), [](const TagStats& a, const TagStats& b) { return a.in_use_bytes > b.in_use_bytes; });
    return out;
  }

  // Gathered under the lock, at the moment of failure.
  OomDetails oom_numbers(std::size_t bytes, Tag tag) const {
    OomDetails d;
    d.requested_bytes = bytes;
    d.rounded_bytes = engine::Heap::round(bytes);
    d.device = description.name;
    d.policy = std::string(to_string(description.policy.growth));
    d.tag = tag == kUntagged ? "untagged" : std::string(tag_name(tag));
    d.limit_bytes = description.limit_bytes;
    d.in_use_bytes = heap->counters().in_use;
    d.reserved_bytes = heap->mapped_bytes();
    d.largest_free_block = heap->largest_free_mapped();
    d.free_in_reserved_bytes = d.reserved_bytes - d.in_use_bytes;
    const backings::BackingMemory memory = backing->memory();
    d.device_free_bytes = memory.free_bytes;
    d.device_total_bytes = memory.total_bytes;
    d.granule_bytes = backing->granularity();
    d.device_refused = heap->last_failure() == engine::HeapFailure::device;
    d.top_tags = tag_stats();
    if (d.top_tags.size() > 5) d.top_tags.resize(5);
    return d;
  }

  [[noreturn]] void throw_bad_free(std::uint64_t addr) const {
    for (const RecentFree& freed : recent) {
      if (freed.addr == addr && freed.size != 0) {
        throw InvalidFree("double free of " + hex(addr) + " on " + description.name + ": it was freed already (" +
                          format_size(freed.size) + ", tag \"" +
                          std::string(freed.tag == kUntagged ? "untagged" : tag_name(freed.tag)) +
                          "\"); free each allocation once");
      }
    }
    throw InvalidFree("free of " + hex(addr) + " on " + description.name +
                      ", which is not a live allocation of this device (never allocated here, freed already, or "
                      "not the start of a block); pass the exact pointer allocate() returned, once");
  }
};

Allocator::Allocator(DeviceDescription description, std::unique_ptr<backings::Backing> backing)
    : impl_(std::make_unique<Impl>()) {
  description.policy.validate();
  impl_->description = std::move(description);
  impl_->backing = std::move(backing);
  impl_->heap = std::make_unique<engine::Heap>(*impl_->backing, heap_options(impl_->description));
}

Allocator::~Allocator() = default;

void* Allocator::try_allocate(std::size_t bytes, Tag tag) noexcept {
  std::lock_guard guard(impl_->lock);
  return reinterpret_cast<void*>(impl_->allocate(bytes, tag));
}

void* Allocator::allocate(std::size_t bytes, Tag tag) {
  OomDetails numbers;
  {
    std::lock_guard guard(impl_->lock);
    if (std::uint64_t addr = impl_->allocate(bytes, tag)) return reinterpret_cast<void*>(addr);
    numbers = impl_->oom_numbers(bytes, tag);
  }
  throw OutOfMemory(explain_oom(std::move(numbers)));
}

void Allocator::deallocate(void* ptr) {
  if (ptr == nullptr) return;
  const auto addr = reinterpret_cast<std::uint64_t>(ptr);
  std::lock_guard guard(impl_->lock);
  engine::Heap::Freed freed;
  if (!impl_->heap->deallocate(addr, freed)) impl_->throw_bad_free(addr);
  Impl::TagCounter& counter = impl_->tags[freed.tag];
  counter.in_use -= freed.size;
  --counter.live;
  impl_->recent[impl_->recent_next++ % Impl::kRecentFrees] = Impl::RecentFree{addr, freed.size, freed.tag};
}

bool Allocator::owns(const void* ptr) const {
  std::lock_guard guard(impl_->lock);
  return impl_->heap->find_live(reinterpret_cast<std::uint64_t>(ptr));
}

std::uint64_t Allocator::trim() {
  std::lock_guard guard(impl_->lock);
  return impl_->heap->release_cached();
}

Stats Allocator::stats() const {
  Stats s;
  {
    std::lock_guard guard(impl_->lock);
    const engine::HeapCounters& c = impl_->heap->counters();
    s.in_use_bytes = c.in_use;
    s.requested_bytes = c.requested;
    s.peak_in_use_bytes = c.peak_in_use;
    s.reserved_bytes = impl_->heap->mapped_bytes();
    s.peak_reserved_bytes = c.peak_mapped;
    s.largest_free_block = impl_->heap->largest_free_mapped();
    s.limit_bytes = impl_->description.limit_bytes;
    s.allocations = c.allocations;
    s.frees = c.frees;
    s.ooms = impl_->ooms;
    s.maps = c.maps;
    s.unmaps = c.unmaps;
    s.live_allocations = impl_->heap->live_allocations();
    s.tags = impl_->tag_stats();
  }
  const backings::HostPages pages = impl_->backing->host_pages();  // may scan page tables: outside the lock
  s.committed_bytes = pages.committed_bytes;
  s.resident_bytes = pages.resident_bytes;
  return s;
}

const DeviceDescription& Allocator::description() const noexcept { return impl_->description; }

void Allocator::set_policy(const Policy& policy) {
  policy.validate();
  std::lock_guard guard(impl_->lock);
  DeviceDescription& d = impl_->description;
  if (impl_->heap->counters().allocations > 0)
    throw InvalidState("cannot change the policy of " + d.name +
                       " after its first allocation; set the policy before the device allocates");
  DeviceDescription changed = d;
  changed.policy = policy;
  if (!changed.policy.reserve) changed.policy.reserve = d.policy.reserve;
  if (policy.memory_limit) {
    changed.limit_bytes = *policy.memory_limit;
  } else if (policy.memory_fraction) {
    changed.limit_bytes = static_cast<std::uint64_t>(std::floor(*policy.memory_fraction * static_cast<double>(d.total_bytes)));
  }
  impl_->heap.reset();  // gives the old reservation back before taking the new one
  try {
    impl_->heap = std::make_unique<engine::Heap>(*impl_->backing, heap_options(changed));
  } catch (...) {
    impl_->heap = std::make_unique<engine::Heap>(*impl_->backing, heap_options(d));
    throw;
  }
  d = std::move(changed);
}

std::string DeviceDescription::summary() const {
  std::string text = "plimsoll: created device " + name + " with " + format_size(limit_bytes) + " limit (" + hardware;
  if (total_bytes) text += ", " + format_size(total_bytes) + " total";
  text += ", policy " + std::string(to_string(policy.growth));
  if (policy.reserve) text += ", reserve " + format_size(*policy.reserve);
  if (policy.release_threshold) text += ", release threshold " + format_size(*policy.release_threshold);
  return text + ")";
}

}  // namespace plimsoll
