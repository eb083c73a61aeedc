// plimsoll::Allocator: the lock, tags, stats and OOM reports around one engine::Heap.
#include "plimsoll/allocator.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <limits>
#include <new>
#include <thread>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "backings/backing.hpp"
#include "engine/allocation_observer.hpp"
#include "engine/fork_handlers.hpp"
#include "engine/heap.hpp"
#include "engine/plan_follower.hpp"
#include "engine/run_plan_follower.hpp"
#include "engine/step_listeners.hpp"
#include "engine/stream_order.hpp"
#include "engine/thread_cache.hpp"
#include "util/spin_lock.hpp"
#include "util/thread_annotations.hpp"
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

// One attempt under the lock: the address, or 0 and why. The reason travels with the 0 to allocate_or_wait's
// failure path, which takes the lock again: a field beside the result would be shared by every thread failing
// on the device meanwhile (the heap's own last_failure() too), so neither is read there.
struct Allocator::Attempt {
  std::uint64_t addr = 0;
  engine::HeapFailure failure = engine::HeapFailure::none;
};

struct Allocator::Impl : engine::FrontUpstream {
  struct TagCounter {
    std::uint64_t in_use = 0, peak = 0, live = 0;
  };
  // The last frees, consulted only to explain a bad free ("freed already, tag ...").
  struct RecentFree {
    std::uint64_t addr = 0, size = 0;
    Tag tag = 0;
  };
  static constexpr std::size_t kRecentFrees = 256;

  // Its name, hardware and total_bytes are fixed at construction (read without the lock); its policy and
  // limit_bytes change under the lock (set_limits), so they are read under it, and description() copies under it.
  DeviceDescription description;
  std::unique_ptr<backings::Backing> backing;
  mutable util::SpinLock lock;  // the device lock: everything below marked GUARDED_BY(lock)
  std::unique_ptr<engine::Heap> heap PLIMSOLL_GUARDED_BY(lock) PLIMSOLL_PT_GUARDED_BY(lock);
  std::vector<TagCounter> tags PLIMSOLL_GUARDED_BY(lock);
  std::array<RecentFree, kRecentFrees> recent PLIMSOLL_GUARDED_BY(lock){};
  std::size_t recent_next PLIMSOLL_GUARDED_BY(lock) = 0;
  std::uint64_t ooms PLIMSOLL_GUARDED_BY(lock) = 0;
  // Recording (record_to): the attached observer (engine/allocation_observer.hpp; null: nothing observes, and
  // the hot paths test only this pointer), whether it captures call sites, and while it does, the site of each
  // live allocation (for snapshot()).
  std::shared_ptr<engine::AllocationObserver> observer PLIMSOLL_GUARDED_BY(lock);
  bool observe_call_sites PLIMSOLL_GUARDED_BY(lock) = false;
  std::unordered_map<std::uint64_t, std::uint32_t> live_sites PLIMSOLL_GUARDED_BY(lock);
  // Stream-ordered reuse (src/engine/stream_order.hpp), on devices whose backing has events; null elsewhere, and
  // then streams are ignored. Declared after heap, which it refers to, so it goes first.
  // The pointer is fixed before the first allocation (the host path tests it before taking the lock); what it
  // points to is guarded.
  // From here to the front's counts, one cache line that only set-up writes (peak_live only on stream-ordered
  // devices, which have no front): every host operation reads `streams`, `front` and `front_on` without the lock,
  // and a line shared with what the locked paths write (the recent frees just above, the front's heap counts
  // below) would be taken from every other core at each of their trips.
  alignas(64) std::unique_ptr<engine::StreamOrder> streams PLIMSOLL_PT_GUARDED_BY(lock);
  std::uint64_t peak_live PLIMSOLL_GUARDED_BY(lock) = 0;  // peak in-use bytes, parked blocks not counted (with streams)
  // Per-thread caches (set_thread_cache; src/engine/thread_cache.hpp): made once, kept until the device goes, so
  // a thread that read `front` may use it without the lock; `front_on` says whether allocations may use it.
  // The heap blocks the front holds (tag kFrontTag), counted under the lock, so stats() can swap them for
  // what the program holds.
  std::unique_ptr<engine::ThreadCaches> front_owner;
  std::atomic<engine::ThreadCaches*> front{nullptr};
  std::atomic<bool> front_on{false};
  // `front` while `front_on`, else null (never set on a device that orders reuse by streams, which has no front): what
  // allocate() reads first, so a hit tests one word where it tested `streams`, `front` and `front_on`. Written with
  // front_on, under the lock. A stale copy is harmless: whoever turns the front off flushes after, which empties every
  // bin (even out of host memory) once the stale reader's operation ends, and the miss reads `front_on` again inside
  // its operation.
  std::atomic<engine::ThreadCaches*> serving_front{nullptr};
  bool front_wanted PLIMSOLL_GUARDED_BY(lock) = false;  // set_thread_cache's choice, restored when a recording detaches
  alignas(64) std::uint64_t front_heap_bytes PLIMSOLL_GUARDED_BY(lock) = 0;
  std::uint64_t front_heap_blocks PLIMSOLL_GUARDED_BY(lock) = 0;
  std::uint64_t front_heap_allocations PLIMSOLL_GUARDED_BY(lock) = 0, front_heap_frees PLIMSOLL_GUARDED_BY(lock) = 0;
  bool pausing PLIMSOLL_GUARDED_BY(lock) = false;  // pause() between stopping the front and pausing the heap
  bool backing_can_wait = false;  // backing->can_wait_for_memory(), asked once at construction
  // Step-aware placement (src/engine/plan_follower.hpp): made at the first step boundary, unless turned off
  // (set_step_plan) or the device orders reuse by streams; null until then, and the hot paths test the pointer.
  std::unique_ptr<engine::PlanFollower> plan PLIMSOLL_PT_GUARDED_BY(lock);
  bool step_plan_enabled PLIMSOLL_GUARDED_BY(lock) = true;
  StepPlanOptions step_plan_options PLIMSOLL_GUARDED_BY(lock);
  // A run plan (src/engine/run_plan_follower.hpp; set_run_plan): loaded before the first allocation, it places every
  // request while `run_plan_active`; kept after it ends, for its stats. While active the front serves nothing
  // (update_front_on), streams reuse nothing and the step-plan follower only watches (PlanFollower::hold_plans).
  std::unique_ptr<engine::RunPlanFollower> run_plan PLIMSOLL_PT_GUARDED_BY(lock);
  bool run_plan_active PLIMSOLL_GUARDED_BY(lock) = false;
  // plan != nullptr || run_plan_active: the allocation path's one test for planned placement (update_planned), so a
  // device with neither pays what it paid before run plans.
  bool planned PLIMSOLL_GUARDED_BY(lock) = false;

  void update_planned() PLIMSOLL_REQUIRES(lock) { planned = plan != nullptr || run_plan_active; }

  // The run plan's first mismatch (or its end at a boundary): from now on everything is as on a device without one.
  void end_run_plan() PLIMSOLL_REQUIRES(lock) {
    run_plan_active = false;
    heap->set_release_threshold(heap_options(description).release_threshold);  // lifted while the plan ran
    if (plan != nullptr) plan->hold_plans(false);
    update_planned();
    update_front_on();
  }

  // A request on a device with a step plan or an active run plan (allocate_unrecorded's planned side).
  // `stream`: the request's, on a device with streams (null: none named).
  std::uint64_t allocate_planned(std::size_t bytes, Tag tag, const engine::StreamHandle* stream = nullptr)
      PLIMSOLL_REQUIRES(lock) {
    if (run_plan_active) {
      bool ended = false;
      const std::uint64_t addr = stream != nullptr ? run_plan->allocate(bytes, tag, &ended, streams.get(), *stream)
                                                   : run_plan->allocate(bytes, tag, &ended);
      if (!ended) {
        if (addr != 0 && plan != nullptr) plan->placed_elsewhere(addr, engine::Heap::round(bytes));
        return addr;
      }
      end_run_plan();  // this request and the rest take the normal path
    }
    return plan != nullptr ? plan->allocate(bytes, tag) : heap->allocate(bytes, tag);
  }

  // The front serves allocations only while set_thread_cache wants it, no recording watches, the device runs (a
  // paused device's blocks are unmapped, so none may be handed out of a cache) and no run plan is active (it places
  // every request, small ones too, at its planned address).
  void update_front_on() PLIMSOLL_REQUIRES(lock) {
    const bool on = front_wanted && observer == nullptr && !pausing && !heap->paused() && !run_plan_active;
    front_on.store(on, std::memory_order_relaxed);
    serving_front.store(on ? front.load(std::memory_order_relaxed) : nullptr, std::memory_order_release);
  }

  std::size_t take_blocks(std::uint64_t size, std::size_t count, std::uint64_t* out) override PLIMSOLL_EXCLUDES(lock) {
    util::SpinGuard guard(lock);
    const std::uint64_t mapped_before = heap->mapped_bytes();
    std::size_t taken = 0;
    for (; taken < count; ++taken) {
      const std::uint64_t addr = heap->allocate(size, engine::kFrontTag);
      if (addr == 0) break;
      out[taken] = addr;
    }
    if (observer != nullptr) record_mapping_change(mapped_before);
    front_heap_bytes += taken * size;
    front_heap_blocks += taken;
    front_heap_allocations += taken;
    return taken;
  }

  void give_back(std::span<const std::uint64_t> addrs) override PLIMSOLL_EXCLUDES(lock) {
    util::SpinGuard guard(lock);
    const std::uint64_t mapped_before = heap->mapped_bytes();
    for (std::uint64_t addr : addrs) {
      engine::Heap::Freed freed;
      if (!heap->deallocate(addr, freed)) continue;  // cannot happen: the front holds live blocks only
      front_heap_bytes -= freed.size;
      --front_heap_blocks;
      ++front_heap_frees;
    }
    if (observer != nullptr) record_mapping_change(mapped_before);
  }

  // A block from this thread's cache when the front is on and serves the size; 0 otherwise.
  std::uint64_t allocate_from_front(std::size_t bytes, Tag tag) PLIMSOLL_EXCLUDES(lock) {
    engine::ThreadCaches* caches = front.load(std::memory_order_acquire);
    if (caches == nullptr || !front_on.load(std::memory_order_relaxed)) return 0;
    using engine::ThreadCaches;  // big blocks only once threads share the device (thread_cache.hpp)
    if (bytes > ThreadCaches::kMaxBinned && (bytes > ThreadCaches::kMaxSize || !caches->big_blocks_on())) {
      if (bytes <= ThreadCaches::kMaxSize) caches->count_thread();  // a thread of big requests only counts too
      return 0;
    }
    return caches->allocate(bytes, tag);
  }

  using Attempt = Allocator::Attempt;

  // allocate_host's first locked attempt, on its own: allocate() runs it before the OOM report's strings are made
  // ready and without asking the front a second time; on failure it goes on with allocate_or_wait(..., &first),
  // which starts after this attempt, so every request makes the same attempts, counts and reports as before (a step
  // plan sees each request once). `report_failure`: as allocate_host's.
  Attempt allocate_first(std::size_t bytes, Tag tag, bool report_failure, const engine::ThreadCaches* caches)
      PLIMSOLL_EXCLUDES(lock) {
    util::SpinGuard guard(lock);
    const bool report = report_failure && caches == nullptr;
    // allocate(), spelled out so that the unrecorded path inlines here
    if (observer != nullptr) [[unlikely]] return allocate_recorded(bytes, tag, report);
    return allocate_unrecorded(bytes, tag, report);
  }

  // Host and simulated devices: the front first (small requests, when on), then the heap under the lock; at
  // the limit, every thread's cache goes back to the heap before the allocation fails.
  // `report_failure` false: a first attempt that may be retried, whose failure is neither counted nor observed (the
  // backing may wait for memory outside the lock, and the retry reports: backings::Backing::wait_for_memory).
  // `tried`: the front and the first locked attempt ran already (allocate_first), with this result.
  Attempt allocate_host(std::size_t bytes, Tag tag, bool report_failure, const Attempt* tried = nullptr)
      PLIMSOLL_EXCLUDES(lock) {
    engine::ThreadCaches* caches = nullptr;
    if (tried != nullptr) {
      caches = front.load(std::memory_order_acquire);
      if (caches == nullptr || tried->failure == engine::HeapFailure::paused) return *tried;
    } else {
      if (std::uint64_t addr = allocate_from_front(bytes, tag)) return {addr};
      caches = front.load(std::memory_order_acquire);
      util::SpinGuard guard(lock);
      const Attempt first = allocate(bytes, tag, report_failure && caches == nullptr);
      if (first.addr != 0 || caches == nullptr || first.failure == engine::HeapFailure::paused) return first;
    }
    try {
      caches->flush();  // runs inside try_allocate (noexcept); a flush out of host memory takes nothing
    } catch (const std::bad_alloc&) {
      return {0, engine::HeapFailure::host_memory};
    }
    util::SpinGuard guard(lock);
    return allocate(bytes, tag, report_failure);
  }

  Attempt allocate(std::size_t bytes, Tag tag, bool report_failure = true) PLIMSOLL_REQUIRES(lock) {
    if (observer != nullptr) [[unlikely]] return allocate_recorded(bytes, tag, report_failure);
    return allocate_unrecorded(bytes, tag, report_failure);
  }

  // Maps and unmaps are recorded as the net change of mapped bytes around a call: the heap maps at most once per
  // call on the way up, and the OOM path's release-then-retry is one net change from the outside.
  void record_mapping_change(std::uint64_t mapped_before) PLIMSOLL_REQUIRES(lock) {
    const std::uint64_t mapped_after = heap->mapped_bytes();
    if (mapped_after > mapped_before) observer->mapped(mapped_after - mapped_before);
    if (mapped_after < mapped_before) observer->unmapped(mapped_before - mapped_after);
  }

  [[gnu::noinline]] Attempt allocate_recorded(std::size_t bytes, Tag tag, bool report_failure)
      PLIMSOLL_REQUIRES(lock) {
    const std::uint32_t site = observe_call_sites ? observer->capture_call_site() : 0;
    const std::uint64_t mapped_before = heap->mapped_bytes();
    const Attempt attempt = allocate_unrecorded(bytes, tag, report_failure);
    record_mapping_change(mapped_before);
    if (attempt.addr == 0) {
      if (report_failure && counts_as_oom(attempt.failure)) observer->out_of_memory(bytes, tag, site);
      return attempt;
    }
    observer->allocated(attempt.addr, bytes, tag, site);
    if (site != 0) remember_site(attempt.addr, site);
    return attempt;
  }

  // The call site snapshot() names for a live block: a diagnostic, so out of host memory it is left out rather than
  // thrown out of a noexcept allocation.
  void remember_site(std::uint64_t addr, std::uint32_t site) noexcept PLIMSOLL_REQUIRES(lock) {
    try {
      live_sites[addr] = site;
    } catch (const std::bad_alloc&) {
    }
  }

  void record_free(std::uint64_t addr, std::uint64_t mapped_before) PLIMSOLL_REQUIRES(lock) {
    observer->freed(addr);
    record_mapping_change(mapped_before);
    if (!live_sites.empty()) live_sites.erase(addr);
  }

  // Inline in every caller: it is the device path's allocation itself (allocate_first's, on every request the front
  // does not serve).
  [[gnu::always_inline]] Attempt allocate_unrecorded(std::size_t bytes, Tag tag, bool report_failure = true,
                                                    const engine::StreamHandle* stream = nullptr)
      PLIMSOLL_REQUIRES(lock) {
    if (!tag_ready(tag)) [[unlikely]] return {0, engine::HeapFailure::host_memory};
    std::uint64_t addr = planned ? allocate_planned(bytes, tag, stream) : heap->allocate(bytes, tag);
    if (addr == 0) {
      const engine::HeapFailure failure = heap->last_failure();  // this attempt's, read in the same lock hold
      if (report_failure && counts_as_oom(failure)) ++ooms;
      return {0, failure};
    }
    count_tag(tag, engine::Heap::round(bytes));
    return {addr};
  }

  // A device out of memory (counted, recorded, reported as OutOfMemory); not a paused device (InvalidState) nor the
  // host out of memory for the device's books (std::bad_alloc: the device was not what failed).
  static bool counts_as_oom(engine::HeapFailure failure) {
    return failure != engine::HeapFailure::paused && failure != engine::HeapFailure::host_memory;
  }

  // A tag's counter is made before the heap changes anything (try_allocate is noexcept: a bad_alloc after the heap
  // placed the block would terminate, or lose the block): out of host memory for it, the allocation declines.
  bool tag_ready(Tag tag) noexcept PLIMSOLL_REQUIRES(lock) {
    if (tag < tags.size()) [[likely]] return true;
    return grow_tags(tag);
  }
  // Out of line: with its handler inline, tag_ready as a whole became a call on every device allocation.
  [[gnu::noinline]] bool grow_tags(Tag tag) noexcept PLIMSOLL_REQUIRES(lock) {
    try {
      tags.resize(static_cast<std::size_t>(tag) + 1);
    } catch (const std::bad_alloc&) {
      return false;
    }
    return true;
  }

  // For a tag tag_ready() said yes to: allocates nothing.
  void count_tag(Tag tag, std::uint64_t size) PLIMSOLL_REQUIRES(lock) {
    TagCounter& counter = tags[tag];
    counter.in_use += size;
    counter.peak = std::max(counter.peak, counter.in_use);
    ++counter.live;
  }

  // ---- Devices with streams (CUDA). The lock is held; `stream` null: the caller named none (no reuse).

  Attempt allocate_on(std::size_t bytes, Tag tag, const engine::StreamHandle* stream, bool report_failure) PLIMSOLL_REQUIRES(lock) {
    const std::uint32_t site = observer != nullptr && observe_call_sites ? observer->capture_call_site() : 0;
    const std::uint64_t mapped_before = heap->mapped_bytes();
    streams->poll();
    const std::uint64_t size = engine::Heap::round(bytes);
    Attempt attempt;
    // A run plan places every request while active: no best-fit reuse of parked blocks then (they go back to the
    // heap as their events complete, as without a stream); a planned range held by blocks parked on this request's
    // own stream is taken from them instead (RunPlanFollower::allocate, StreamOrder::unpark_range).
    if (stream != nullptr && !run_plan_active && bytes <= heap->span_bytes() && !heap->paused() && tag_ready(tag))
      attempt.addr = streams->reuse(size, size <= heap->options().small_max, *stream);
    if (attempt.addr != 0) {
      heap->relabel(attempt.addr, bytes, tag);
      count_tag(tag, size);
    } else {
      attempt = allocate_unrecorded(bytes, tag, report_failure, stream);
    }
    const std::uint64_t addr = attempt.addr;
    if (observer != nullptr) {
      record_mapping_change(mapped_before);
      if (addr != 0) {
        observer->allocated(addr, bytes, tag, site);
        if (site != 0) remember_site(addr, site);
      } else if (report_failure && counts_as_oom(attempt.failure)) {
        observer->out_of_memory(bytes, tag, site);
      }
    }
    if (addr != 0) peak_live = std::max(peak_live, heap->counters().in_use - streams->counters().parked_bytes);
    return attempt;
  }

  static void back_off(unsigned polls) {
    // Device work takes microseconds to milliseconds: spin politely first, then sleep in short steps.
    if (polls < 64) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(50));
  }

  // Out of memory while blocks are parked: waits for the work queued before those frees (the lock released
  // between polls, so other threads go on) and retries whenever some came back; 0 once none is left to wait for.
  // Only the last attempt reports a failure, and only when `report_failure` (false: the caller retries).
  Attempt allocate_streamed(std::size_t bytes, Tag tag, const engine::StreamHandle* stream, bool report_failure)
      PLIMSOLL_REQUIRES(lock) {
    const bool can_wait = !streams->empty();
    if (const Attempt attempt = allocate_on(bytes, tag, stream, report_failure && !can_wait);
        attempt.addr != 0 || !can_wait)
      return attempt;
    const std::uint64_t target = streams->close_batches();
    for (unsigned polls = 0;; ++polls) {
      const std::size_t freed = streams->poll();
      const bool more = streams->pending_before(target);
      if (freed > 0 || !more) {
        if (const Attempt attempt = allocate_on(bytes, tag, stream, report_failure && !more);
            attempt.addr != 0 || !more)
          return attempt;
      }
      lock.unlock();
      back_off(polls);
      lock.lock();
    }
  }

  // An allocation, with the device's streams when it has them, tried once more after the backing waited for memory
  // (outside the lock) when it can (a shared GPU whose borrowers were asked to give memory back). On failure, by
  // the reason its own attempt returned: with `numbers`, throws InvalidState on a paused device, std::bad_alloc when
  // the host's memory failed (the device's books: a tag's counter, the heap's records), and fills `numbers` for the
  // OOM report; without, 0.
  // `tried`: allocate_first ran this request's first attempt already, with this result (host devices only).
  std::uint64_t allocate_or_wait(std::size_t bytes, Tag tag, const engine::StreamHandle* stream, OomDetails* numbers,
                                 const Attempt* tried = nullptr) PLIMSOLL_EXCLUDES(lock) {
    for (bool last = !backing_can_wait;; last = true, tried = nullptr) {
      Attempt attempt;
      if (streams == nullptr) {
        attempt = allocate_host(bytes, tag, last, tried);
      } else {
        util::SpinGuard guard(lock);
        attempt = allocate_streamed(bytes, tag, stream, last);
      }
      if (attempt.addr != 0) return attempt.addr;
      if (attempt.failure == engine::HeapFailure::host_memory) {
        if (numbers != nullptr) throw std::bad_alloc();  // the host's memory, not the device's: no device report
        return 0;
      }
      if (attempt.failure == engine::HeapFailure::paused) {
        if (numbers != nullptr) throw_paused(bytes);
        return 0;
      }
      if (last) {
        if (numbers != nullptr) {
          // What the program holds through the front, for the report: read before the device lock.
          const engine::FrontTotals held = front_totals();
          util::SpinGuard guard(lock);
          *numbers = oom_numbers(bytes, tag, held, attempt.failure);
        }
        return 0;
      }
      backing->wait_for_memory();  // never under the lock: other threads allocate and free meanwhile
    }
  }

  // Until every block parked so far is back in the heap.
  void wait_for_parked() PLIMSOLL_REQUIRES(lock) {
    const std::uint64_t target = streams->close_batches();
    const std::uint64_t mapped_before = heap->mapped_bytes();
    for (unsigned polls = 0;; ++polls) {
      streams->poll();
      if (!streams->pending_before(target)) break;
      lock.unlock();
      back_off(polls);
      lock.lock();
    }
    if (observer != nullptr) record_mapping_change(mapped_before);
  }

  std::uint64_t parked_bytes() const PLIMSOLL_REQUIRES(lock) { return streams ? streams->counters().parked_bytes : 0; }

  // A free without its stream on a device with streams: a parked block is a double free; a live one forgets
  // its recorded streams, and the next unmap (possibly the heap's release threshold, at once) must wait for the
  // whole device, since nothing says which streams still use it.
  void before_unordered_free(std::uint64_t addr) PLIMSOLL_REQUIRES(lock) {
    if (streams->is_parked(addr)) throw_bad_free(addr);
    if (!heap->find_live(addr)) return;
    streams->forget_streams(addr);
    if (backings::StreamEvents* events = backing->stream_events()) events->note_unordered_free();
  }

  // `held`: what the program holds through the front, per tag (its peaks are not tracked: see docs/engine.md).
  std::vector<TagStats> tag_stats(const std::vector<engine::FrontTagCount>& held = {}) const PLIMSOLL_REQUIRES(lock) {
    std::vector<TagStats> out;
    for (std::size_t i = 0; i < std::max(tags.size(), held.size()); ++i) {
      const TagCounter counter = i < tags.size() ? tags[i] : TagCounter{};
      const engine::FrontTagCount front_count = i < held.size() ? held[i] : engine::FrontTagCount{};
      const std::uint64_t in_use = counter.in_use + front_count.bytes;
      const std::uint64_t peak = std::max(counter.peak, in_use);
      if (peak == 0) continue;
      out.push_back(TagStats{std::string(i == 0 ? "untagged" : tag_name(static_cast<Tag>(i))), in_use, peak,
                             counter.live + front_count.live});
    }
    std::sort(out.begin(), out.end(), [](const TagStats& a, const TagStats& b) { return a.in_use_bytes > b.in_use_bytes; });
    return out;
  }

  // Gathered under the lock, at the moment of failure.
  // `held`: what the program holds through the front (its blocks count in the heap's in_use, as front blocks).
  // `failure`: why this thread's attempt failed (not the heap's last_failure(), which another thread may have
  // changed since).
  OomDetails oom_numbers(std::size_t bytes, Tag tag, const engine::FrontTotals& held, engine::HeapFailure failure) const
      PLIMSOLL_REQUIRES(lock) {
    OomDetails d;
    d.requested_bytes = bytes;
    d.rounded_bytes = engine::Heap::round(bytes);
    d.device = description.name;
    d.policy = std::string(to_string(description.policy.growth));
    d.tag = tag == kUntagged ? "untagged" : std::string(tag_name(tag));
    d.limit_bytes = description.limit_bytes;
    d.in_use_bytes = heap->counters().in_use - parked_bytes() - front_heap_bytes + held.handed_bytes;
    d.reserved_bytes = heap->mapped_bytes();
    d.largest_free_block = heap->largest_free_mapped();
    d.free_in_reserved_bytes = d.reserved_bytes - d.in_use_bytes;
    const backings::BackingMemory memory = backing->memory();
    d.device_free_bytes = memory.free_bytes;
    d.device_total_bytes = memory.total_bytes;
    d.granule_bytes = backing->granularity();
    d.device_refused = failure == engine::HeapFailure::device;
    d.top_tags = tag_stats(held.tags);
    if (d.top_tags.size() > 5) d.top_tags.resize(5);
    return d;
  }

  // What the program holds through the front, taken before the device lock (the front's locks come first).
  engine::FrontTotals front_totals() const PLIMSOLL_EXCLUDES(lock) {
    engine::ThreadCaches* caches = front.load(std::memory_order_acquire);
    return caches != nullptr ? caches->totals() : engine::FrontTotals{};
  }

  [[noreturn]] void throw_paused(std::size_t bytes) const {
    throw InvalidState("cannot allocate " + format_size(bytes) + " on " + description.name +
                       ": the device is paused (its memory given back); call resume() first");
  }

  [[noreturn]] void throw_bad_free(std::uint64_t addr) const PLIMSOLL_REQUIRES(lock) {
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

namespace {

// The policy's thread_cache, where it says something: a device that orders reuse by streams has its own reuse and
// takes none (the key may come from a default policy that every device inherits).
void apply_thread_cache_policy(Allocator& device, const Policy& policy) {
  if (policy.thread_cache && !device.stream_ordered()) device.set_thread_cache(*policy.thread_cache);
}

}  // namespace

Allocator::Allocator(DeviceDescription description, std::unique_ptr<backings::Backing> backing)
    : impl_(std::make_unique<Impl>()) {
  description.policy.validate();
  impl_->description = std::move(description);
  impl_->backing = std::move(backing);
  impl_->heap = std::make_unique<engine::Heap>(*impl_->backing, heap_options(impl_->description));
  if (backings::StreamEvents* events = impl_->backing->stream_events())
    impl_->streams = std::make_unique<engine::StreamOrder>(*impl_->heap, *events);
  impl_->backing_can_wait = impl_->backing->can_wait_for_memory();
  apply_thread_cache_policy(*this, impl_->description.policy);
  // Taken around fork() from here on, with the backing's (engine/fork_handlers.hpp).
  engine::register_device_lock(impl_->lock, impl_->backing.get());
  try {
    engine::listen_for_steps(this);
  } catch (...) {  // out of host memory: no destructor will run to take the lock out again
    engine::unregister_device_lock(impl_->lock);
    throw;
  }
}

Allocator::~Allocator() {
  engine::unregister_device_lock(impl_->lock);  // first: a fork from now on leaves this device's lock alone
  engine::stop_listening_for_steps(this);
  impl_->serving_front.store(nullptr, std::memory_order_release);
  impl_->front.store(nullptr, std::memory_order_release);
  impl_->front_owner.reset();  // cached blocks back to the heap while it is still there
  if (impl_->streams == nullptr) return;
  util::SpinGuard guard(impl_->lock);
  impl_->wait_for_parked();
  impl_->streams.reset();
  // Blocks still live may be in use by queued kernels: the heap's unmapping waits for the whole device.
  backings::StreamEvents* events = impl_->backing->stream_events();
  if (events != nullptr && impl_->heap->live_allocations() != 0) events->note_unordered_free();
}

// Host and simulated devices (no streams) take exactly the path they took before streams existed: the stream
// checks sit before the lock, on a pointer fixed at construction, so they cost one predicted branch.
void* Allocator::try_allocate(std::size_t bytes, Tag tag) noexcept {
  return reinterpret_cast<void*>(impl_->allocate_or_wait(bytes, tag, nullptr, nullptr));
}

void* Allocator::allocate(std::size_t bytes, Tag tag) {
  // A cache hit first, before an OOM report's strings are made ready (a few nanoseconds of a 15 ns budget), and
  // before anything else: one word (set only while the front serves, never on a device with streams) and one compare.
  // The front answers with the device's path itself when it declines (front_declined), so this is a tail call and a
  // hit returns straight to the caller: no frame here and no test of the answer.
  engine::ThreadCaches* caches = impl_->serving_front.load(std::memory_order_acquire);
  if (caches != nullptr && bytes <= engine::ThreadCaches::kMaxBinned) [[likely]]
    return reinterpret_cast<void*>(caches->allocate_or(bytes, tag, &Allocator::front_declined, this));
  return allocate_past_front(bytes, tag, false);
}

std::uint64_t Allocator::front_declined(void* self, std::uint64_t bytes, std::uint16_t tag) {
  return reinterpret_cast<std::uint64_t>(static_cast<Allocator*>(self)->allocate_past_front(bytes, tag, true));
}

void* Allocator::allocate_past_front(std::size_t bytes, Tag tag, bool front_asked) {
  if (impl_->streams != nullptr) [[unlikely]] return allocate_with_streams(bytes, nullptr, tag);
  if (!front_asked) {
    if (std::uint64_t addr = impl_->allocate_from_front(bytes, tag)) return reinterpret_cast<void*>(addr);
  }
  const engine::ThreadCaches* caches = impl_->front.load(std::memory_order_acquire);
  const Attempt first = impl_->allocate_first(bytes, tag, !impl_->backing_can_wait, caches);
  if (first.addr != 0) return reinterpret_cast<void*>(first.addr);
  return allocate_reporting(bytes, tag, first);
}

// allocate()'s side after a failed first attempt, out of line: the OOM report's strings are made only here.
void* Allocator::allocate_reporting(std::size_t bytes, Tag tag, const Attempt& first) {
  OomDetails numbers;
  if (std::uint64_t addr = impl_->allocate_or_wait(bytes, tag, nullptr, &numbers, &first))
    return reinterpret_cast<void*>(addr);
  throw OutOfMemory(explain_oom(std::move(numbers)));
}

void* Allocator::allocate_with_streams(std::size_t bytes, const void* stream, Tag tag) {
  OomDetails numbers;
  const auto* handle = static_cast<const engine::StreamHandle*>(stream);
  if (std::uint64_t addr = impl_->allocate_or_wait(bytes, tag, handle, &numbers)) return reinterpret_cast<void*>(addr);
  throw OutOfMemory(explain_oom(std::move(numbers)));
}

void* Allocator::try_allocate(std::size_t bytes, Stream stream, Tag tag) noexcept {
  if (impl_->streams == nullptr) return try_allocate(bytes, tag);
  return reinterpret_cast<void*>(impl_->allocate_or_wait(bytes, tag, &stream.handle, nullptr));
}

void* Allocator::allocate(std::size_t bytes, Stream stream, Tag tag) {
  if (impl_->streams == nullptr) return allocate(bytes, tag);
  return allocate_with_streams(bytes, &stream.handle, tag);
}

void Allocator::deallocate(void* ptr, Stream stream) {
  if (ptr == nullptr) return;
  if (impl_->streams == nullptr) return deallocate(ptr);
  const auto addr = reinterpret_cast<std::uint64_t>(ptr);
  util::SpinGuard guard(impl_->lock);
  engine::BlockView block{};
  if (!impl_->heap->live_block(addr, block) || impl_->streams->is_parked(addr)) impl_->throw_bad_free(addr);
  const std::uint64_t mapped_before = impl_->heap->mapped_bytes();
  // Relabelled while the block is surely live: park may free it into the heap at once (no event for a recorded
  // stream: the device is synchronized instead). Out of host memory park throws with the block still live and
  // untouched, and the label goes back, so the free can be made again.
  impl_->heap->relabel(addr, 0, 0);
  try {
    impl_->streams->park(block, stream.handle);
  } catch (...) {
    impl_->heap->relabel(addr, block.requested, block.tag);
    throw;
  }
  if (impl_->observer != nullptr) impl_->record_free(addr, mapped_before);
  Impl::TagCounter& counter = impl_->tags[block.tag];
  counter.in_use -= block.size;
  --counter.live;
  impl_->recent[impl_->recent_next++ % Impl::kRecentFrees] = Impl::RecentFree{addr, block.size, block.tag};
}

void Allocator::record_stream(void* ptr, Stream stream) {
  const auto addr = reinterpret_cast<std::uint64_t>(ptr);
  util::SpinGuard guard(impl_->lock);
  if (!impl_->heap->find_live(addr) || (impl_->streams != nullptr && impl_->streams->is_parked(addr)))
    throw InvalidArgument("record_stream of " + hex(addr) + " on " + impl_->description.name +
                          ", which is not a live allocation of this device; pass a pointer allocate() returned, "
                          "before freeing it");
  if (impl_->streams != nullptr && !impl_->streams->record_stream(addr, stream.handle)) throw std::bad_alloc();
}

void Allocator::deallocate(void* ptr) {
  if (ptr == nullptr) return;
  const auto addr = reinterpret_cast<std::uint64_t>(ptr);
  engine::ThreadCaches* caches = impl_->front.load(std::memory_order_acquire);
  // Kept in a cache only while the front serves, which the front reads inside its operation (`front_on`).
  if (caches != nullptr && caches->deallocate(addr)) return;
  deallocate_in_heap(ptr);
}

void Allocator::deallocate_in_heap(void* ptr) {
  const auto addr = reinterpret_cast<std::uint64_t>(ptr);
  util::SpinGuard guard(impl_->lock);
  if (impl_->streams != nullptr) [[unlikely]] impl_->before_unordered_free(addr);
  const std::uint64_t mapped_before = impl_->heap->mapped_bytes();
  engine::Heap::Freed freed;
  // A front block not handed out (cached in some thread) is free for the program: freeing it is a double free,
  // refused by the heap in the lookup that frees. Only while front blocks exist: a Tag is a plain number, so a
  // program's own block may carry kFrontTag's value when no front ever ran.
  const std::uint32_t refused = impl_->front_heap_blocks != 0 ? engine::kFrontTag : engine::Heap::kNoRefusedTag;
  if (!impl_->heap->deallocate(addr, freed, refused)) impl_->throw_bad_free(addr);
  if (impl_->plan != nullptr) impl_->plan->freed(addr, freed.size);
  if (impl_->observer != nullptr) impl_->record_free(addr, mapped_before);
  Impl::TagCounter& counter = impl_->tags[freed.tag];
  counter.in_use -= freed.size;
  --counter.live;
  impl_->recent[impl_->recent_next++ % Impl::kRecentFrees] = Impl::RecentFree{addr, freed.size, freed.tag};
}

bool Allocator::owns(const void* ptr) const {
  const auto addr = reinterpret_cast<std::uint64_t>(ptr);
  std::uint64_t requested = 0;
  Tag tag = 0;
  engine::ThreadCaches* caches = impl_->front.load(std::memory_order_acquire);
  if (caches != nullptr && caches->handed_out(addr, requested, tag)) return true;
  util::SpinGuard guard(impl_->lock);
  engine::BlockView block{};
  return impl_->heap->live_block(addr, block) && block.tag != engine::kFrontTag &&
         (impl_->streams == nullptr || !impl_->streams->is_parked(addr));
}

void Allocator::set_thread_cache(std::uint64_t bytes_per_thread) {
  if (impl_->streams != nullptr)
    throw InvalidState("per-thread caches are for host and simulated devices; " + impl_->description.name +
                       " orders reuse by streams, which its own per-stream reuse already serves");
  engine::ThreadCaches* caches = nullptr;
  {
    util::SpinGuard guard(impl_->lock);
    // Read under the lock: two threads turning the caches on at once must make one front, not replace it.
    caches = impl_->front.load(std::memory_order_acquire);
    impl_->front_wanted = bytes_per_thread > 0;
    if (caches == nullptr && bytes_per_thread > 0) {
      impl_->front_owner = std::make_unique<engine::ThreadCaches>(*impl_, bytes_per_thread, &impl_->front_on);
      caches = impl_->front_owner.get();
      impl_->front.store(caches, std::memory_order_release);
    }
    if (caches != nullptr && bytes_per_thread > 0) caches->set_bytes_per_thread(bytes_per_thread);
    impl_->update_front_on();
  }
  if (caches != nullptr && bytes_per_thread == 0) caches->flush();
}

bool Allocator::stream_ordered() const noexcept { return impl_->streams != nullptr; }

std::uint64_t Allocator::thread_cache() const {
  engine::ThreadCaches* caches = impl_->front.load(std::memory_order_acquire);
  util::SpinGuard guard(impl_->lock);
  return impl_->front_wanted && caches != nullptr ? caches->bytes_per_thread() : 0;
}

void Allocator::reset_peaks() {
  util::SpinGuard guard(impl_->lock);
  impl_->heap->reset_peaks();
  impl_->peak_live = impl_->heap->counters().in_use - impl_->parked_bytes();
  for (Impl::TagCounter& tag : impl_->tags) tag.peak = tag.in_use;
}

void Allocator::step() {
  std::unique_ptr<engine::PackJob> job;
  {
    util::SpinGuard guard(impl_->lock);
    // A run plan whose requests were all placed ends at the boundary closing its last step: step plans take over
    // at this boundary, from the step it placed last (docs/engine.md, "Run plans").
    if (impl_->run_plan_active && impl_->run_plan->at_boundary()) impl_->end_run_plan();
    // A paused device maps nothing until resume(): its plan waits for the next boundary after that.
    if (!impl_->step_plan_enabled || impl_->streams != nullptr || impl_->heap->paused()) return;
    if (impl_->plan == nullptr) {
      impl_->plan = std::make_unique<engine::PlanFollower>(*impl_->heap, impl_->step_plan_options);
      impl_->plan->hold_plans(impl_->run_plan_active);
      impl_->update_planned();
    }
    // Ending a transition installs the ideal plan, which maps and unmaps: a recording counts it here, whether or
    // not the boundary then packs.
    const std::uint64_t mapped_before = impl_->heap->mapped_bytes();
    job = impl_->plan->begin_boundary();
    if (impl_->observer != nullptr) impl_->record_mapping_change(mapped_before);
    if (job == nullptr) return;
  }
  // Packing costs up to the square of the step's requests (about a second on ResNet-50): other threads allocate
  // and free on this device meanwhile. The job reads only its own copies. A plan is an optimisation: a pack that
  // fails (out of host memory) leaves the device on best fit, and finish_boundary still ends the boundary.
  try {
    job->pack();
  } catch (...) {
    job->plan = engine::StepPlan{};
  }
  util::SpinGuard guard(impl_->lock);
  // The follower may have been dropped (set_step_plan(false), the heap made again) while packing.
  if (impl_->plan == nullptr || impl_->plan->serial() != job->follower) return;
  const std::uint64_t mapped_before = impl_->heap->mapped_bytes();
  impl_->plan->finish_boundary(std::move(job));
  if (impl_->observer != nullptr) impl_->record_mapping_change(mapped_before);
}

void Allocator::set_step_plan(bool enabled) {
  util::SpinGuard guard(impl_->lock);
  impl_->step_plan_enabled = enabled;
  if (!enabled) impl_->plan.reset();  // planned blocks are ordinary heap blocks: nothing to undo
  impl_->update_planned();
}

void Allocator::set_step_plan_options(const StepPlanOptions& options) {
  util::SpinGuard guard(impl_->lock);
  impl_->step_plan_options = options;
  impl_->plan.reset();  // made again at the next boundary, with the options
  impl_->update_planned();
}

std::uint64_t Allocator::trim() {
  if (engine::ThreadCaches* caches = impl_->front.load(std::memory_order_acquire)) caches->flush();
  util::SpinGuard guard(impl_->lock);
  if (impl_->streams != nullptr) impl_->wait_for_parked();
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
  {
    util::SpinGuard guard(impl_->lock);
    impl_->observer.swap(observer);  // the previous observer goes after the lock is released
    impl_->observe_call_sites = call_sites;
    impl_->live_sites.clear();
    // A recording sees every call: the front steps aside while one is attached.
    impl_->update_front_on();
  }
  if (engine::ThreadCaches* caches = impl_->front.load(std::memory_order_acquire)) caches->flush();
}

std::string Allocator::snapshot() const {
  using nlohmann::json;
  json segments = json::array();
  json blocks = json::array();
  engine::ThreadCaches* caches = impl_->front.load(std::memory_order_acquire);
  // Before the device lock: the front's locks come first (a thread holding its cache's lock may wait for the
  // device lock to give blocks back), so totals() under the device lock could deadlock.
  const std::uint64_t front_handed = impl_->front_totals().handed_bytes;
  util::SpinGuard guard(impl_->lock);
  const engine::Heap& heap = *impl_->heap;
  const engine::GranuleMap& granules = heap.granules();
  const std::uint64_t granule = granules.granule();
  granules.for_each_run(0, heap.span_bytes() / granule, true, [&](std::uint64_t first, std::uint64_t count) {
    segments.push_back({{"address", granules.address_of(first)}, {"bytes", count * granule}});
  });
  // Read under the lock for the walk below (a lambda is outside the lock analysis's view).
  const engine::StreamOrder* streams = impl_->streams.get();
  const std::unordered_map<std::uint64_t, std::uint32_t>* live_sites = &impl_->live_sites;
  engine::AllocationObserver* observer = impl_->observer.get();
  heap.walk([&](const engine::BlockView& block) {
    if (block.page) return;  // a small page is listed through its blocks
    const bool parked = streams != nullptr && streams->is_parked(block.addr);
    std::uint64_t requested = block.requested;
    Tag tag = block.tag;
    const bool cached = !block.free && caches != nullptr && block.tag == engine::kFrontTag &&
                        !caches->handed_out(block.addr, requested, tag);
    json entry = {{"address", block.addr},
                  {"bytes", block.size},
                  {"state", block.free ? "free" : parked ? "parked" : cached ? "cached" : "allocated"},
                  {"small", block.small}};
    if (!block.free && !parked && !cached) {
      entry["requested_bytes"] = requested;
      entry["tag"] = tag == kUntagged ? "untagged" : std::string(tag_name(tag));
      if (const auto site = live_sites->find(block.addr); site != live_sites->end()) {
        entry["call_site"] = observer->describe_call_site(site->second);
      }
    }
    blocks.push_back(std::move(entry));
  });
  const engine::HeapCounters& counters = heap.counters();
  const json snapshot = {{"device", impl_->description.name},
                         {"policy", to_string(impl_->description.policy.growth)},
                         {"limit_bytes", impl_->description.limit_bytes},
                         {"in_use_bytes", counters.in_use - impl_->parked_bytes() - impl_->front_heap_bytes +
                                              front_handed},
                         {"reserved_bytes", heap.mapped_bytes()},
                         {"granule_bytes", granule},
                         {"segments", std::move(segments)},
                         {"blocks", std::move(blocks)}};
  return snapshot.dump();
}

MemoryUsage Allocator::usage() const {
  const engine::FrontTotals front = impl_->front_totals();
  util::SpinGuard guard(impl_->lock);
  return {.in_use_bytes = impl_->heap->counters().in_use - impl_->parked_bytes() - impl_->front_heap_bytes +
                          front.handed_bytes,
          .reserved_bytes = impl_->heap->mapped_bytes()};
}

Stats Allocator::stats() const {
  Stats s;
  const engine::FrontTotals front = impl_->front_totals();
  {
    util::SpinGuard guard(impl_->lock);
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
    // The front's heap blocks out, what the program holds through it in: cached blocks are free for the program.
    // The peak stays the heap's, which counts cached blocks: an upper bound (docs/engine.md, "Threads").
    s.in_use_bytes = s.in_use_bytes - impl_->front_heap_bytes + front.handed_bytes;
    s.requested_bytes = s.requested_bytes - impl_->front_heap_bytes + front.handed_requested;
    s.live_allocations = s.live_allocations - impl_->front_heap_blocks + front.handed_live;
    s.allocations = s.allocations - impl_->front_heap_allocations + front.allocations;
    s.frees = s.frees - impl_->front_heap_frees + front.frees;
    if (impl_->streams != nullptr) {  // parked blocks are live in the heap, free for the program
      const engine::StreamOrderCounters& p = impl_->streams->counters();
      s.in_use_bytes -= p.parked_bytes;
      s.peak_in_use_bytes = impl_->peak_live;
      s.allocations += p.reuses;
      s.frees = s.frees - p.released + p.parks;
      s.live_allocations -= p.parked_blocks;
      s.parked_bytes = p.parked_bytes;
      s.stream_fallbacks = p.fallbacks;
      s.unrecorded_streams = p.unrecorded_streams;
    }
    s.tags = impl_->tag_stats(front.tags);
    if (impl_->plan != nullptr) s.step_plan = impl_->plan->stats();
    if (impl_->run_plan != nullptr) s.run_plan = impl_->run_plan->stats();
  }
  const backings::HostPages pages = impl_->backing->host_pages();  // may scan page tables: outside the lock
  s.committed_bytes = pages.committed_bytes;
  s.resident_bytes = pages.resident_bytes;
  return s;
}

DeviceDescription Allocator::description() const {
  util::SpinGuard guard(impl_->lock);
  return impl_->description;
}

void Allocator::set_limits(const DeviceLimits& limits) {
  limits.policy.validate();
  {
    util::SpinGuard guard(impl_->lock);
    DeviceDescription& d = impl_->description;
    if (impl_->heap->counters().allocations > 0)
      throw InvalidState("cannot change the limits of " + d.name +
                         " after its first allocation; set its limits and policy before the device allocates");
    DeviceDescription changed = d;
    changed.policy = limits.policy;
    changed.limit_bytes = limits.limit_bytes;
    if (impl_->front_heap_blocks != 0)
      throw InvalidState("cannot change the limits of " + d.name + " while its per-thread caches hold memory; call "
                         "trim() first");
    impl_->streams.reset();  // refers to the heap; nothing is parked before the first allocation
    impl_->plan.reset();     // refers to the heap too; made again at the next step boundary
    // So does a run plan, checked against the limit this replaces: dropped, to be loaded again (Runtime::configure
    // does, from the new policy's run_plan).
    impl_->run_plan.reset();
    impl_->run_plan_active = false;
    impl_->update_planned();
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
    // The limits alone: the name is read without the lock (error messages, record_to), so it is never rewritten.
    d.policy = std::move(changed.policy);
    d.limit_bytes = changed.limit_bytes;
  }
  apply_thread_cache_policy(*this, limits.policy);
}

// Pause and resume: the heap does the work (engine/heap_pause.cpp); here the locks, the thread caches, the device's
// queued work and the recording.
std::uint64_t Allocator::pause(PauseOptions options) {
  engine::ThreadCaches* caches = impl_->front.load(std::memory_order_acquire);
  if (caches != nullptr) {
    // The front stops serving first, then every cached block goes back to the heap (the front's locks come before
    // the device lock), so nothing can hand out a block while its memory is away.
    {
      util::SpinGuard guard(impl_->lock);
      impl_->pausing = true;  // set_thread_cache or record_to meanwhile must not turn the front back on
      impl_->update_front_on();
    }
    try {
      caches->flush();
    } catch (...) {  // not paused: the front serves again (a flush empties the bins even out of host memory)
      util::SpinGuard guard(impl_->lock);
      impl_->pausing = false;
      impl_->update_front_on();
      throw;
    }
  }
  util::SpinGuard guard(impl_->lock);
  impl_->pausing = false;  // the heap's paused state keeps the front off from here
  if (impl_->streams != nullptr) impl_->wait_for_parked();
  // Queued kernels may still use live blocks: unmapping them must wait for the whole device.
  backings::StreamEvents* events = impl_->backing->stream_events();
  if (events != nullptr && impl_->heap->live_allocations() != 0 && !impl_->heap->paused()) events->note_unordered_free();
  const std::uint64_t mapped_before = impl_->heap->mapped_bytes();
  std::uint64_t unmapped = 0;
  try {
    unmapped = impl_->heap->pause(options.keep_contents, impl_->description.name);
  } catch (...) {
    if (impl_->observer != nullptr) impl_->record_mapping_change(mapped_before);  // the cache may have gone
    impl_->update_front_on();
    throw;
  }
  if (impl_->observer != nullptr) impl_->record_mapping_change(mapped_before);
  impl_->update_front_on();
  return unmapped;
}

void Allocator::check_pausable(PauseOptions options) const {
  util::SpinGuard guard(impl_->lock);
  impl_->heap->check_pausable(options.keep_contents, impl_->description.name);
}

void Allocator::resume() {
  // Like an allocation: a backing that can wait for memory (a shared GPU whose borrowers were asked to give it back)
  // waits without the lock, and the resume is tried once more.
  for (bool last = !impl_->backing_can_wait;; last = true) {
    try {
      util::SpinGuard guard(impl_->lock);
      const std::uint64_t mapped_before = impl_->heap->mapped_bytes();
      impl_->heap->resume(impl_->description.name);
      if (impl_->observer != nullptr) impl_->record_mapping_change(mapped_before);
      impl_->update_front_on();
      return;
    } catch (const PauseError&) {
      if (last) throw;
    }
    impl_->backing->wait_for_memory();
  }
}

bool Allocator::paused() const {
  util::SpinGuard guard(impl_->lock);
  return impl_->heap->paused();
}

std::uint64_t Allocator::paused_bytes() const {
  util::SpinGuard guard(impl_->lock);
  return impl_->heap->paused_bytes();
}

std::string RunPlanLoader::install(Allocator& allocator, engine::RunPlan plan) {
  Allocator::Impl& impl = *allocator.impl_;
  util::SpinGuard guard(impl.lock);
  // Request i of the plan is the device's request i: once one was made, the count cannot be lined up.
  if (impl.heap->counters().allocations > 0)
    throw InvalidState("cannot load a run plan on " + impl.description.name +
                       " after its first allocation; load it before the device allocates (PLIMSOLL_RUN_PLAN, the "
                       "device's run_plan key, or set_run_plan right after making the device)");
  // One plan per device: a second one's granules would be mapped beside the first's, and mapped_ahead count both.
  if (impl.run_plan != nullptr)
    throw InvalidState("a run plan is loaded on " + impl.description.name + " already (" +
                       (impl.run_plan->plan().source.empty() ? std::string("in memory") : impl.run_plan->plan().source) +
                       "); load one plan per device: the policy's run_plan (PLIMSOLL_RUN_PLAN) or set_run_plan, "
                       "not both");
  std::string why = engine::run_plan_mismatch(plan, *impl.heap, impl.description.name);
  if (!why.empty()) return why;
  // Made and mapped ahead before it is published: map_ahead may throw std::bad_alloc, leaving the device without.
  auto follower = std::make_unique<engine::RunPlanFollower>(*impl.heap, std::move(plan));
  const std::uint64_t mapped_before = impl.heap->mapped_bytes();
  follower->map_ahead();
  impl.run_plan = std::move(follower);
  if (impl.observer != nullptr) impl.record_mapping_change(mapped_before);
  impl.run_plan_active = true;
  // The granules mapped ahead are the plan's budget for the requests to come: a release threshold would give them
  // back at the first free, and the plan map them again. Lifted while active; end_run_plan puts it back.
  impl.heap->set_release_threshold(std::numeric_limits<std::uint64_t>::max());
  if (impl.plan != nullptr) impl.plan->hold_plans(true);
  impl.update_planned();
  impl.update_front_on();
  return {};
}

std::string Allocator::set_run_plan(const std::string& path) {
  return RunPlanLoader::install(*this, engine::read_run_plan(path));
}

std::string DeviceDescription::summary() const {
  std::string text = "plimsoll: created device " + name + " with " + format_size(limit_bytes) + " limit (" + hardware;
  if (total_bytes) text += ", " + format_size(total_bytes) + " total";
  text += ", policy " + std::string(to_string(policy.growth));
  if (policy.reserve) text += ", reserve " + format_size(*policy.reserve);
  if (policy.release_threshold) text += ", release threshold " + format_size(*policy.release_threshold);
  if (policy.thread_cache) text += ", thread cache " + format_size(*policy.thread_cache);
  // Which barrier lets other threads empty the caches: membarrier, or a full fence per operation without it.
  if (policy.thread_cache.value_or(0) > 0) text += std::string(" (") + engine::ThreadCaches::barrier_kind() + ")";
  if (policy.run_plan) text += ", run plan " + *policy.run_plan;
  return text + ")";
}

}  // namespace plimsoll
