// plimsoll::Allocator: the lock, tags, stats and OOM reports around one engine::Heap.
#include "plimsoll/allocator.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "backings/backing.hpp"
#include "engine/allocation_observer.hpp"
#include "engine/heap.hpp"
#include "engine/stream_order.hpp"
#include "util/spin_lock.hpp"
#include "plimsoll/recording.hpp"
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
  mutable util::SpinLock lock;
  std::vector<TagCounter> tags;
  std::array<RecentFree, kRecentFrees> recent{};
  std::size_t recent_next = 0;
  std::uint64_t ooms = 0;
  // Recording (record_to): the attached observer (engine/allocation_observer.hpp; null: nothing observes, and
  // the hot paths test only this pointer), whether it captures call sites, and while it does, the site of each
  // live allocation (for snapshot()).
  std::shared_ptr<engine::AllocationObserver> observer;
  bool observe_call_sites = false;
  std::unordered_map<std::uint64_t, std::uint32_t> live_sites;
  // Stream-ordered reuse (src/engine/stream_order.hpp), on devices whose backing has events; null elsewhere, and
  // then streams are ignored. Declared after heap, which it refers to, so it goes first.
  std::unique_ptr<engine::StreamOrder> streams;
  std::uint64_t peak_live = 0;  // peak in-use bytes, parked blocks not counted (with streams)

  std::uint64_t allocate(std::size_t bytes, Tag tag) {
    if (observer != nullptr) [[unlikely]] return allocate_recorded(bytes, tag);
    return allocate_unrecorded(bytes, tag);
  }

  // Maps and unmaps are recorded as the net change of mapped bytes around a call: the heap maps at most once per
  // call on the way up, and the OOM path's release-then-retry is one net change from the outside.
  void record_mapping_change(std::uint64_t mapped_before) {
    const std::uint64_t mapped_after = heap->mapped_bytes();
    if (mapped_after > mapped_before) observer->mapped(mapped_after - mapped_before);
    if (mapped_after < mapped_before) observer->unmapped(mapped_before - mapped_after);
  }

  std::uint64_t allocate_recorded(std::size_t bytes, Tag tag) {
    const std::uint32_t site = observe_call_sites ? observer->capture_call_site() : 0;
    const std::uint64_t mapped_before = heap->mapped_bytes();
    const std::uint64_t addr = allocate_unrecorded(bytes, tag);
    record_mapping_change(mapped_before);
    if (addr == 0) {
      observer->out_of_memory(bytes, tag, site);
      return 0;
    }
    observer->allocated(addr, bytes, tag, site);
    if (site != 0) live_sites[addr] = site;
    return addr;
  }

  void record_free(std::uint64_t addr, std::uint64_t mapped_before) {
    observer->freed(addr);
    record_mapping_change(mapped_before);
    if (!live_sites.empty()) live_sites.erase(addr);
  }

  std::uint64_t allocate_unrecorded(std::size_t bytes, Tag tag, bool report_failure = true) {
    std::uint64_t addr = heap->allocate(bytes, tag);
    if (addr == 0) {
      if (report_failure) ++ooms;
      return 0;
    }
    count_tag(tag, engine::Heap::round(bytes));
    return addr;
  }

  void count_tag(Tag tag, std::uint64_t size) {
    if (tag >= tags.size()) tags.resize(static_cast<std::size_t>(tag) + 1);
    TagCounter& counter = tags[tag];
    counter.in_use += size;
    counter.peak = std::max(counter.peak, counter.in_use);
    ++counter.live;
  }

  // ---- Devices with streams (CUDA). The lock is held; `stream` null: the caller named none (no reuse).

  std::uint64_t allocate_on(std::size_t bytes, Tag tag, const engine::StreamHandle* stream, bool report_failure) {
    const std::uint32_t site = observer != nullptr && observe_call_sites ? observer->capture_call_site() : 0;
    const std::uint64_t mapped_before = heap->mapped_bytes();
    streams->poll();
    const std::uint64_t size = engine::Heap::round(bytes);
    std::uint64_t addr = 0;
    if (stream != nullptr && bytes <= heap->span_bytes())
      addr = streams->reuse(size, size <= heap->options().small_max, *stream);
    if (addr != 0) {
      heap->relabel(addr, bytes, tag);
      count_tag(tag, size);
    } else {
      addr = allocate_unrecorded(bytes, tag, report_failure);
    }
    if (observer != nullptr) {
      record_mapping_change(mapped_before);
      if (addr != 0) {
        observer->allocated(addr, bytes, tag, site);
        if (site != 0) live_sites[addr] = site;
      } else if (report_failure) {
        observer->out_of_memory(bytes, tag, site);
      }
    }
    if (addr != 0) peak_live = std::max(peak_live, heap->counters().in_use - streams->counters().parked_bytes);
    return addr;
  }

  static void back_off(unsigned polls) {
    // Device work takes microseconds to milliseconds: spin politely first, then sleep in short steps.
    if (polls < 64) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(50));
  }

  // Out of memory while blocks are parked: waits for the work queued before those frees (the lock released
  // between polls, so other threads go on) and retries whenever some came back; 0 once none is left to wait for.
  std::uint64_t allocate_streamed(std::unique_lock<util::SpinLock>& guard, std::size_t bytes, Tag tag,
                                  const engine::StreamHandle* stream) {
    const bool can_wait = !streams->empty();
    if (std::uint64_t addr = allocate_on(bytes, tag, stream, !can_wait); addr != 0 || !can_wait) return addr;
    const std::uint64_t target = streams->close_batches();
    for (unsigned polls = 0;; ++polls) {
      const std::size_t freed = streams->poll();
      const bool more = streams->pending_before(target);
      if (freed > 0 || !more) {
        if (std::uint64_t addr = allocate_on(bytes, tag, stream, !more); addr != 0 || !more) return addr;
      }
      guard.unlock();
      back_off(polls);
      guard.lock();
    }
  }

  // Until every block parked so far is back in the heap.
  void wait_for_parked(std::unique_lock<util::SpinLock>& guard) {
    const std::uint64_t target = streams->close_batches();
    const std::uint64_t mapped_before = heap->mapped_bytes();
    for (unsigned polls = 0;; ++polls) {
      streams->poll();
      if (!streams->pending_before(target)) break;
      guard.unlock();
      back_off(polls);
      guard.lock();
    }
    if (observer != nullptr) record_mapping_change(mapped_before);
  }

  std::uint64_t parked_bytes() const { return streams ? streams->counters().parked_bytes : 0; }

  // A free without its stream on a device with streams: a parked block is a double free; a live one forgets
  // its recorded streams, and the next unmap (possibly the heap's release threshold, at once) must wait for the
  // whole device, since nothing says which streams still use it.
  void before_unordered_free(std::uint64_t addr) {
    if (streams->is_parked(addr)) throw_bad_free(addr);
    if (!heap->find_live(addr)) return;
    streams->forget_streams(addr);
    if (backings::StreamEvents* events = backing->stream_events()) events->note_unordered_free();
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
    d.in_use_bytes = heap->counters().in_use - parked_bytes();
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
  if (backings::StreamEvents* events = impl_->backing->stream_events())
    impl_->streams = std::make_unique<engine::StreamOrder>(*impl_->heap, *events);
}

Allocator::~Allocator() {
  if (impl_->streams == nullptr) return;
  std::unique_lock guard(impl_->lock);
  impl_->wait_for_parked(guard);
  impl_->streams.reset();
  // Blocks still live may be in use by queued kernels: the heap's unmapping waits for the whole device.
  backings::StreamEvents* events = impl_->backing->stream_events();
  if (events != nullptr && impl_->heap->live_allocations() != 0) events->note_unordered_free();
}

// Host and simulated devices (no streams) take exactly the path they took before streams existed: the stream
// checks sit before the lock, on a pointer fixed at construction, so they cost one predicted branch.
void* Allocator::try_allocate(std::size_t bytes, Tag tag) noexcept {
  if (impl_->streams != nullptr) [[unlikely]] {
    std::unique_lock guard(impl_->lock);
    return reinterpret_cast<void*>(impl_->allocate_streamed(guard, bytes, tag, nullptr));
  }
  std::lock_guard guard(impl_->lock);
  return reinterpret_cast<void*>(impl_->allocate(bytes, tag));
}

void* Allocator::allocate(std::size_t bytes, Tag tag) {
  if (impl_->streams != nullptr) [[unlikely]] return allocate_with_streams(bytes, nullptr, tag);
  OomDetails numbers;
  {
    std::lock_guard guard(impl_->lock);
    if (std::uint64_t addr = impl_->allocate(bytes, tag)) return reinterpret_cast<void*>(addr);
    numbers = impl_->oom_numbers(bytes, tag);
  }
  throw OutOfMemory(explain_oom(std::move(numbers)));
}

void* Allocator::allocate_with_streams(std::size_t bytes, const void* stream, Tag tag) {
  OomDetails numbers;
  {
    std::unique_lock guard(impl_->lock);
    const auto* handle = static_cast<const engine::StreamHandle*>(stream);
    if (std::uint64_t addr = impl_->allocate_streamed(guard, bytes, tag, handle)) return reinterpret_cast<void*>(addr);
    numbers = impl_->oom_numbers(bytes, tag);
  }
  throw OutOfMemory(explain_oom(std::move(numbers)));
}

void* Allocator::try_allocate(std::size_t bytes, Stream stream, Tag tag) noexcept {
  std::unique_lock guard(impl_->lock);
  if (impl_->streams == nullptr) return reinterpret_cast<void*>(impl_->allocate(bytes, tag));
  return reinterpret_cast<void*>(impl_->allocate_streamed(guard, bytes, tag, &stream.handle));
}

void* Allocator::allocate(std::size_t bytes, Stream stream, Tag tag) {
  if (impl_->streams == nullptr) return allocate(bytes, tag);
  return allocate_with_streams(bytes, &stream.handle, tag);
}

void Allocator::deallocate(void* ptr, Stream stream) {
  if (ptr == nullptr) return;
  if (impl_->streams == nullptr) return deallocate(ptr);
  const auto addr = reinterpret_cast<std::uint64_t>(ptr);
  std::lock_guard guard(impl_->lock);
  engine::BlockView block{};
  if (!impl_->heap->live_block(addr, block) || impl_->streams->is_parked(addr)) impl_->throw_bad_free(addr);
  const std::uint64_t mapped_before = impl_->heap->mapped_bytes();
  impl_->heap->relabel(addr, 0, 0);
  impl_->streams->park(block, stream.handle);
  if (impl_->observer != nullptr) impl_->record_free(addr, mapped_before);
  Impl::TagCounter& counter = impl_->tags[block.tag];
  counter.in_use -= block.size;
  --counter.live;
  impl_->recent[impl_->recent_next++ % Impl::kRecentFrees] = Impl::RecentFree{addr, block.size, block.tag};
}

void Allocator::record_stream(void* ptr, Stream stream) {
  const auto addr = reinterpret_cast<std::uint64_t>(ptr);
  std::lock_guard guard(impl_->lock);
  if (!impl_->heap->find_live(addr) || (impl_->streams != nullptr && impl_->streams->is_parked(addr)))
    throw InvalidArgument("record_stream of " + hex(addr) + " on " + impl_->description.name +
                          ", which is not a live allocation of this device; pass a pointer allocate() returned, "
                          "before freeing it");
  if (impl_->streams != nullptr) impl_->streams->record_stream(addr, stream.handle);
}

void Allocator::deallocate(void* ptr) {
  if (ptr == nullptr) return;
  const auto addr = reinterpret_cast<std::uint64_t>(ptr);
  std::lock_guard guard(impl_->lock);
  if (impl_->streams != nullptr) [[unlikely]] impl_->before_unordered_free(addr);
  const std::uint64_t mapped_before = impl_->heap->mapped_bytes();
  engine::Heap::Freed freed;
  if (!impl_->heap->deallocate(addr, freed)) impl_->throw_bad_free(addr);
  if (impl_->observer != nullptr) impl_->record_free(addr, mapped_before);
  Impl::TagCounter& counter = impl_->tags[freed.tag];
  counter.in_use -= freed.size;
  --counter.live;
  impl_->recent[impl_->recent_next++ % Impl::kRecentFrees] = Impl::RecentFree{addr, freed.size, freed.tag};
}

bool Allocator::owns(const void* ptr) const {
  const auto addr = reinterpret_cast<std::uint64_t>(ptr);
  std::lock_guard guard(impl_->lock);
  return impl_->heap->find_live(addr) && (impl_->streams == nullptr || !impl_->streams->is_parked(addr));
}

bool Allocator::stream_ordered() const noexcept { return impl_->streams != nullptr; }

void Allocator::reset_peaks() {
  std::lock_guard guard(impl_->lock);
  impl_->heap->reset_peaks();
  impl_->peak_live = impl_->heap->counters().in_use - impl_->parked_bytes();
  for (Impl::TagCounter& tag : impl_->tags) tag.peak = tag.in_use;
}

std::uint64_t Allocator::trim() {
  std::unique_lock guard(impl_->lock);
  if (impl_->streams != nullptr) impl_->wait_for_parked(guard);
  const std::uint64_t mapped_before = impl_->heap->mapped_bytes();
  const std::uint64_t released = impl_->heap->release_cached();
  if (impl_->observer != nullptr) impl_->record_mapping_change(mapped_before);
  return released;
}

void Allocator::record_to(std::shared_ptr<Recording> recording) {
  // Made before taking the device lock: naming the device in the trace takes the recording's own lock.
  std::shared_ptr<engine::AllocationObserver> observer =
      recording ? Recording::observer_for(std::move(recording), impl_->description.name) : nullptr;
  const bool call_sites = observer != nullptr && observer->wants_call_sites();
  std::lock_guard guard(impl_->lock);
  impl_->observer.swap(observer);  // the previous observer goes after the lock is released
  impl_->observe_call_sites = call_sites;
  impl_->live_sites.clear();
}

std::string Allocator::snapshot() const {
  using nlohmann::json;
  json segments = json::array();
  json blocks = json::array();
  std::lock_guard guard(impl_->lock);
  const engine::Heap& heap = *impl_->heap;
  const engine::GranuleMap& granules = heap.granules();
  const std::uint64_t granule = granules.granule();
  granules.for_each_run(0, heap.span_bytes() / granule, true, [&](std::uint64_t first, std::uint64_t count) {
    segments.push_back({{"address", granules.address_of(first)}, {"bytes", count * granule}});
  });
  heap.walk([&](const engine::BlockView& block) {
    if (block.page) return;  // a small page is listed through its blocks
    const bool parked = impl_->streams != nullptr && impl_->streams->is_parked(block.addr);
    json entry = {{"address", block.addr},
                  {"bytes", block.size},
                  {"state", block.free ? "free" : parked ? "parked" : "allocated"},
                  {"small", block.small}};
    if (!block.free && !parked) {
      entry["requested_bytes"] = block.requested;
      entry["tag"] = block.tag == kUntagged ? "untagged" : std::string(tag_name(block.tag));
      if (const auto site = impl_->live_sites.find(block.addr); site != impl_->live_sites.end()) {
        entry["call_site"] = impl_->observer->describe_call_site(site->second);
      }
    }
    blocks.push_back(std::move(entry));
  });
  const engine::HeapCounters& counters = heap.counters();
  const json snapshot = {{"device", impl_->description.name},
                         {"policy", to_string(impl_->description.policy.growth)},
                         {"limit_bytes", impl_->description.limit_bytes},
                         {"in_use_bytes", counters.in_use - impl_->parked_bytes()},
                         {"reserved_bytes", heap.mapped_bytes()},
                         {"granule_bytes", granule},
                         {"segments", std::move(segments)},
                         {"blocks", std::move(blocks)}};
  return snapshot.dump();
}

MemoryUsage Allocator::usage() const {
  std::lock_guard guard(impl_->lock);
  return {.in_use_bytes = impl_->heap->counters().in_use - impl_->parked_bytes(),
          .reserved_bytes = impl_->heap->mapped_bytes()};
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
    s.address_space_bytes = impl_->heap->span_bytes();
    s.peak_reserved_bytes = c.peak_mapped;
    s.largest_free_block = impl_->heap->largest_free_mapped();
    s.limit_bytes = impl_->description.limit_bytes;
    s.allocations = c.allocations;
    s.frees = c.frees;
    s.ooms = impl_->ooms;
    s.maps = c.maps;
    s.unmaps = c.unmaps;
    s.live_allocations = impl_->heap->live_allocations();
    if (impl_->streams != nullptr) {  // parked blocks are live in the heap, free for the program
      const engine::StreamOrderCounters& p = impl_->streams->counters();
      s.in_use_bytes -= p.parked_bytes;
      s.peak_in_use_bytes = impl_->peak_live;
      s.allocations += p.reuses;
      s.frees = s.frees - p.released + p.parks;
      s.live_allocations -= p.parked_blocks;
      s.parked_bytes = p.parked_bytes;
    }
    s.tags = impl_->tag_stats();
  }
  const backings::HostPages pages = impl_->backing->host_pages();  // may scan page tables: outside the lock
  s.committed_bytes = pages.committed_bytes;
  s.resident_bytes = pages.resident_bytes;
  return s;
}

const DeviceDescription& Allocator::description() const noexcept { return impl_->description; }

void Allocator::set_limits(const DeviceLimits& limits) {
  limits.policy.validate();
  std::lock_guard guard(impl_->lock);
  DeviceDescription& d = impl_->description;
  if (impl_->heap->counters().allocations > 0)
    throw InvalidState("cannot change the policy of " + d.name +
                       " after its first allocation; set the policy before the device allocates");
  DeviceDescription changed = d;
  changed.policy = limits.policy;
  changed.limit_bytes = limits.limit_bytes;
  impl_->streams.reset();  // refers to the heap; nothing is parked before the first allocation
  impl_->heap.reset();  // gives the old reservation back before taking the new one
  try {
    impl_->heap = std::make_unique<engine::Heap>(*impl_->backing, heap_options(changed));
  } catch (...) {
    impl_->heap = std::make_unique<engine::Heap>(*impl_->backing, heap_options(d));
    if (backings::StreamEvents* events = impl_->backing->stream_events())
      impl_->streams = std::make_unique<engine::StreamOrder>(*impl_->heap, *events);
    throw;
  }
  if (backings::StreamEvents* events = impl_->backing->stream_events())
    impl_->streams = std::make_unique<engine::StreamOrder>(*impl_->heap, *events);
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
