#pragma once
// The writer behind plimsoll::Recording. Allocators call the event methods under their own lock; this class has
// a lock of its own because one recording may serve several devices.
//
// Invariants:
// - buffer_ holds whole records only, and is written out (in order) before it would pass its capacity, so the
//   file is always a valid prefix of the trace: a crash loses at most the buffered records. Step boundaries
//   (plimsoll::step) write it out too, so a crash keeps every finished step.
// - A tag, marker or device string record is in the file (or earlier in buffer_) before any event that names it.
//   Call-site strings of native stacks are written at close(), after the events (the format allows that); those of
//   interpreter frames (Python) as soon as they are first captured, so a killed process keeps them.
// - After close() every event method is a no-op.
#include <atomic>
#include <bitset>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include "plimsoll/allocator.hpp"
#include "plimsoll/recording.hpp"
#include "telemetry/recording/call_sites.hpp"
#include "telemetry/recording/event_clock.hpp"
#include "telemetry/traces/trace_binary.hpp"
#include "util/spin_lock.hpp"

namespace plimsoll {

struct Recording::Impl {
  Impl(std::string file_path, RecordingOptions recording_options);
  ~Impl();

  // --- the hot path: one record each, under lock_ ---
  void allocate(std::uint16_t device, std::uint64_t id, std::uint64_t bytes, Tag tag, std::uint32_t site) {
    event(telemetry::binary::RecordKind::allocate, device, tag, site, id, bytes);
  }
  void free(std::uint16_t device, std::uint64_t id) { event(telemetry::binary::RecordKind::free, device, kUntagged, 0, id, 0); }
  void map(std::uint16_t device, std::uint64_t bytes) { event(telemetry::binary::RecordKind::map, device, kUntagged, 0, 0, bytes); }
  void unmap(std::uint16_t device, std::uint64_t bytes) {
    event(telemetry::binary::RecordKind::unmap, device, kUntagged, 0, 0, bytes);
  }
  void oom(std::uint16_t device, std::uint64_t bytes, Tag tag, std::uint32_t site) {
    event(telemetry::binary::RecordKind::oom, device, tag, site, 0, bytes);
  }

  bool capturing_call_sites() const { return call_sites_ != nullptr; }
  /// The calling stack's id (0 when none could be captured). Frames inside plimsoll stay in the stack: they are
  /// skipped when the site is named, which keeps the hot path a bare stack walk.
  /// Called inside a device's noexcept try_allocate, under its lock: out of host memory for a new stack's record the
  /// allocation goes on without a call site (0; the call sites keep nothing half made), as it does when the
  /// interpreter's describe() (caller code) throws anything, and a new interpreter site whose name cannot be made
  /// now is named at close() instead.
  std::uint32_t capture_call_site() noexcept {
    std::uint32_t site = 0;
    try {
      site = call_sites_->capture();
    } catch (...) {  // std::bad_alloc, or anything the interpreter's describe() (caller code) throws
      return 0;
    }
    if (site > newest_site_seen_.load(std::memory_order_relaxed)) [[unlikely]] name_new_sites(site);
    return site;
  }
  /// "function (file:line)" of a site id from capture_call_site(); "" for 0 or without call sites.
  std::string describe_call_site(std::uint32_t site) {
    return call_sites_ == nullptr ? std::string() : call_sites_->describe(site);
  }

  /// The id of a device's name in this trace (written on first use).
  std::uint16_t device_id(std::string_view name);
  void marker(std::string_view text);
  /// Ends the open step, writes the call sites and the end record, closes the file; reports a write error.
  void close();

  /// fork(): this recording's lock (then its call sites'), held across it by the engine's handlers from its opening
  /// to its destruction (observers take the lock after close() too), so the child inherits none from a thread that
  /// does not exist there.
  void lock_for_fork() noexcept;
  void unlock_after_fork() noexcept;

  const std::string path;
  const RecordingOptions options;
  std::atomic<std::uint64_t> events_written{0};
  std::atomic<bool> is_closed{false};

 private:
  void event(telemetry::binary::RecordKind kind, std::uint16_t device, Tag tag, std::uint32_t site, std::uint64_t id,
             std::uint64_t bytes) {
    const std::uint64_t time_ns = clock_.now_ns();
    const std::uint32_t thread = thread_number();
    std::lock_guard guard(lock_);
    if (is_closed.load(std::memory_order_relaxed)) return;
    if (tag != kUntagged && !tag_defined(tag)) define_tag(tag);
    if (used_ + sizeof(telemetry::binary::EventRecord) > buffer_.size()) flush_locked();
    // Built in place: a record assembled on the stack and copied would be read back with wide loads right after
    // its narrow stores, which stalls store forwarding three times a record. Every record's size is a multiple of
    // 8 and the buffer comes from operator new, so the record is aligned.
    new (buffer_.data() + used_) telemetry::binary::EventRecord{kind, 0, device, tag, 0, thread, site, time_ns, id, bytes, 0};
    used_ += sizeof(telemetry::binary::EventRecord);
    ++records_;
    // Writers hold lock_, so a plain increment suffices: a locked read-modify-write would cost as much as the
    // rest of the record. The atomic only lets events() read it without the lock.
    events_written.store(events_written.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }

  // Interpreter sites (Python's "file.py:LINE") are named when first captured, so a process killed before close()
  // still leaves their names in the file; native stacks wait for close(), where symbolizing is affordable.
  void name_new_sites(std::uint32_t newest) noexcept;
  std::atomic<std::uint32_t> newest_site_seen_{0};
  std::vector<bool> sites_written_;  // under lock_

  friend void plimsoll::step();
  void step_boundary(int next_step);
  static std::uint32_t thread_number();
  bool tag_defined(Tag tag) const { return tags_defined_.test(tag); }
  void define_tag(Tag tag);
  void marker_locked(std::string_view text);
  void write_string_locked(telemetry::binary::StringTable table, std::uint32_t id, std::string_view text);
  void append_locked(const void* data, std::size_t bytes);
  void flush_locked();

  util::SpinLock lock_;
  int fd_ = -1;
  telemetry::EventClock clock_;
  std::unique_ptr<telemetry::CallSites> call_sites_;  // set when options.call_sites
  std::vector<char> buffer_;
  std::size_t used_ = 0;
  std::uint64_t records_ = 0;  // records written or buffered, string records included (the end record counts them)
  // Every tag's bit, made with the recording (8 KiB): defining a tag allocates nothing, since events are recorded
  // inside the device's noexcept try_allocate.
  std::bitset<std::size_t{1} << (8 * sizeof(Tag))> tags_defined_;
  std::vector<std::string> devices_;
  std::uint32_t markers_ = 0;
  int open_step_ = 0;   // the step whose "begin" marker this recording holds and whose "end" it does not, or 0
  int write_error_ = 0;  // errno of a failed write: recording stopped, close() reports it
};

}  // namespace plimsoll
