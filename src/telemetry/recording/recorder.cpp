// plimsoll::Recording: the trace writer (layout in telemetry/traces/trace_binary.hpp), and plimsoll::step().
#include "telemetry/recording/recorder.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <mutex>
#include <system_error>
#include <utility>

#include <fmt/format.h>

#include "engine/fork_handlers.hpp"
#include "engine/step_listeners.hpp"
#include "plimsoll/error.hpp"
#include "util/thread_annotations.hpp"

namespace plimsoll {
namespace {

std::string errno_text(int error) { return std::error_code(error, std::generic_category()).message(); }

// Open recordings, for step(): it writes its markers into each of them. And every recording not yet destroyed,
// closed or not (an observer still attached takes its lock), for fork(): the engine's handlers hold the mutex and
// then, after the device locks, each one's lock (engine/fork_handlers.hpp, ForkParticipant).
struct OpenRecordings final : engine::ForkParticipant {
  std::mutex mutex;
  std::vector<Recording::Impl*> recordings;
  std::vector<Recording::Impl*> alive;
  int step = 0;

  void lock_registry_for_fork() noexcept override { mutex.lock(); }
  void lock_members_for_fork() noexcept override {
    for (Recording::Impl* recording : alive) recording->lock_for_fork();
  }
  void unlock_after_fork() noexcept override {
    for (auto recording = alive.rbegin(); recording != alive.rend(); ++recording) (*recording)->unlock_after_fork();
    mutex.unlock();
  }
};

OpenRecordings& open_recordings() {
  // Never destroyed: the fork handlers keep it registered until the process ends.
  static auto* const registry = [] {
    auto* made = new OpenRecordings;
    engine::register_fork_participant(*made);
    return made;
  }();
  return *registry;
}

}  // namespace

Recording::Impl::Impl(std::string file_path, RecordingOptions recording_options)
    : path(std::move(file_path)), options(recording_options) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    throw InvalidArgument(fmt::format("cannot write the recording to {}: {}; pass a path in a writable folder", path,
                                      errno_text(errno)));
  }
  // Room for the longest string record, so every record fits in one buffer.
  constexpr std::size_t kMinBufferBytes = telemetry::binary::kMaxStringBytes + 4096;
  buffer_.resize(std::max(options.buffer_bytes, kMinBufferBytes));
  if (options.call_sites) call_sites_ = std::make_unique<telemetry::CallSites>();
  telemetry::binary::FileHeader header{};
  std::copy(std::begin(telemetry::binary::kMagic), std::end(telemetry::binary::kMagic), header.magic);
  header.version = telemetry::binary::kVersion;
  header.event_record_bytes = sizeof(telemetry::binary::EventRecord);
  header.start_unix_ns = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
  std::lock_guard guard(lock_);
  append_locked(&header, sizeof header);
}

Recording::Impl::~Impl() {
  if (fd_ >= 0) ::close(fd_);
}

void Recording::Impl::lock_for_fork() noexcept PLIMSOLL_NO_THREAD_SAFETY_ANALYSIS {  // held until unlock_after_fork
  lock_.lock();
  if (call_sites_ != nullptr) call_sites_->lock_for_fork();
}

void Recording::Impl::unlock_after_fork() noexcept PLIMSOLL_NO_THREAD_SAFETY_ANALYSIS {
  if (call_sites_ != nullptr) call_sites_->unlock_after_fork();
  lock_.unlock();
}

std::uint32_t Recording::Impl::thread_number() {
  static std::atomic<std::uint32_t> next{1};
  thread_local const std::uint32_t number = next.fetch_add(1, std::memory_order_relaxed);
  return number;
}

void Recording::Impl::define_tag(Tag tag) {
  tags_defined_.set(tag);
  write_string_locked(telemetry::binary::StringTable::tag, tag, tag_name(tag));
}

std::uint16_t Recording::Impl::device_id(std::string_view name) {
  std::lock_guard guard(lock_);
  const auto known = std::find(devices_.begin(), devices_.end(), name);
  if (known != devices_.end()) return static_cast<std::uint16_t>(known - devices_.begin() + 1);
  if (devices_.size() >= 65535) throw InvalidState("a recording holds at most 65535 devices");
  devices_.emplace_back(name);
  const auto id = static_cast<std::uint16_t>(devices_.size());
  write_string_locked(telemetry::binary::StringTable::device, id, name);
  return id;
}

void Recording::Impl::marker(std::string_view text) {
  std::lock_guard guard(lock_);
  if (!is_closed.load(std::memory_order_relaxed)) marker_locked(text);
}

void Recording::Impl::marker_locked(std::string_view text) {
  const std::uint32_t id = ++markers_;
  write_string_locked(telemetry::binary::StringTable::marker, id, text);
  const telemetry::binary::EventRecord record{telemetry::binary::RecordKind::marker, 0, 0, 0, 0, thread_number(), 0, clock_.now_ns(), id,
                                   0, 0};
  append_locked(&record, sizeof record);
  ++records_;
  events_written.store(events_written.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

void Recording::Impl::name_new_sites(std::uint32_t newest) noexcept {
  std::uint32_t seen = newest_site_seen_.load(std::memory_order_relaxed);
  while (seen < newest && !newest_site_seen_.compare_exchange_weak(seen, newest, std::memory_order_relaxed)) {
  }
  if (seen >= newest) return;  // another thread took this range
  for (std::uint32_t id = seen + 1; id <= newest; ++id) {
    // Out of host memory (the name's copy, the written-sites bits), the site is left unmarked: close() names every
    // site not written yet, so the trace still gets it, and nothing is thrown out of the noexcept try_allocate.
    try {
      const std::string name = call_sites_->interpreter_name(id);
      if (name.empty()) continue;
      std::lock_guard guard(lock_);
      if (is_closed.load(std::memory_order_relaxed)) return;
      if (id >= sites_written_.size()) sites_written_.resize(static_cast<std::size_t>(id) + 1, false);
      sites_written_[id] = true;
      write_string_locked(telemetry::binary::StringTable::site, id, name);
    } catch (...) {  // std::bad_alloc, or what the interpreter's describe() (caller code) throws
    }
  }
}

void Recording::Impl::step_boundary(int next_step) {
  std::lock_guard guard(lock_);
  if (is_closed.load(std::memory_order_relaxed)) return;
  if (open_step_ != 0) marker_locked(fmt::format("step {} end", open_step_));
  marker_locked(fmt::format("step {} begin", next_step));
  open_step_ = next_step;
  // One write per step: a process killed later still leaves every finished step in the file (for the leak watch
  // of `plimsoll run`), at the cost of a system call per training step.
  flush_locked();
}

void Recording::Impl::write_string_locked(telemetry::binary::StringTable table, std::uint32_t id, std::string_view text) {
  if (text.size() > telemetry::binary::kMaxStringBytes) text = text.substr(0, telemetry::binary::kMaxStringBytes);
  const telemetry::binary::StringRecordHeader header{telemetry::binary::RecordKind::string, table, 0, id,
                                          static_cast<std::uint32_t>(text.size()), 0};
  static constexpr char kPadding[8] = {};
  // Flushed before, not in the middle: buffers hold whole records.
  if (used_ + telemetry::binary::string_record_bytes(text.size()) > buffer_.size()) flush_locked();
  append_locked(&header, sizeof header);
  append_locked(text.data(), text.size());
  append_locked(kPadding, static_cast<std::size_t>(telemetry::binary::string_record_bytes(text.size()) - 16 - text.size()));
  ++records_;
}

void Recording::Impl::append_locked(const void* data, std::size_t bytes) {
  if (used_ + bytes > buffer_.size()) flush_locked();
  std::memcpy(buffer_.data() + used_, data, bytes);
  used_ += bytes;
}

void Recording::Impl::flush_locked() {
  const char* data = buffer_.data();
  std::size_t bytes = std::exchange(used_, 0);
  // Written by the thread that filled the buffer, while it is still in this core's cache. A writer thread was
  // measured slower: every record then lands in cache lines the other core last read (docs/recording.md).
  while (bytes > 0 && write_error_ == 0) {
    const ssize_t written = ::write(fd_, data, bytes);
    if (written < 0) {
      if (errno == EINTR) continue;
      // Dropping events silently would make the trace lie: recording stops here and close() reports why.
      write_error_ = errno;
      is_closed.store(true, std::memory_order_relaxed);
      return;
    }
    data += written;
    bytes -= static_cast<std::size_t>(written);
  }
}

void Recording::Impl::close() {
  {
    std::lock_guard registry_guard(open_recordings().mutex);
    auto& list = open_recordings().recordings;
    list.erase(std::remove(list.begin(), list.end(), this), list.end());
  }
  bool closing_now = false;
  {
    std::lock_guard guard(lock_);
    closing_now = !is_closed.exchange(true, std::memory_order_relaxed);
    if (closing_now && open_step_ != 0) marker_locked(fmt::format("step {} end", std::exchange(open_step_, 0)));
  }
  if (closing_now) {
    // Symbolized now, once per distinct stack, and outside the spin lock: naming takes milliseconds per module,
    // and no event can add a site once is_closed is set.
    const std::vector<std::string> sites = call_sites_ != nullptr ? call_sites_->symbolize_all() : std::vector<std::string>{};
    std::lock_guard guard(lock_);
    for (std::uint32_t id = 1; id < sites.size(); ++id) {
      if (id < sites_written_.size() && sites_written_[id]) continue;
      write_string_locked(telemetry::binary::StringTable::site, id, sites[id]);
    }
    const telemetry::binary::EventRecord end{telemetry::binary::RecordKind::end, 0, 0, 0, 0, 0, 0, clock_.now_ns(), records_, 0, 0};
    append_locked(&end, sizeof end);
    flush_locked();
  }
  if (fd_ >= 0 && ::close(std::exchange(fd_, -1)) != 0 && write_error_ == 0) write_error_ = errno;
  if (const int error = std::exchange(write_error_, 0); error != 0) {
    throw InvalidArgument(fmt::format("writing the recording {} failed: {}; free disk space or record to another "
                                      "path",
                                      path, errno_text(error)));
  }
}

// --- the public face ---

Recording::Recording(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Recording::~Recording() {
  try {
    impl_->close();
  } catch (const Error&) {
    // A destructor cannot report; the trace is cut short and the reader says so.
  }
  const std::lock_guard guard(open_recordings().mutex);
  std::erase(open_recordings().alive, impl_.get());  // a fork from now on leaves this recording alone
}

std::shared_ptr<Recording> Recording::open(const std::string& path, RecordingOptions options) {
  std::shared_ptr<Recording> recording(new Recording(std::make_unique<Impl>(path, options)));
  OpenRecordings& registry = open_recordings();
  std::lock_guard guard(registry.mutex);
  registry.alive.reserve(registry.alive.size() + 1);  // both pushes or neither: the second cannot throw
  registry.recordings.reserve(registry.recordings.size() + 1);
  registry.alive.push_back(recording->impl_.get());
  registry.recordings.push_back(recording->impl_.get());
  return recording;
}

void Recording::marker(std::string_view text) { impl_->marker(text); }
void Recording::close() { impl_->close(); }
bool Recording::closed() const { return impl_->is_closed.load(std::memory_order_relaxed); }
const std::string& Recording::path() const { return impl_->path; }
std::uint64_t Recording::events() const { return impl_->events_written.load(std::memory_order_relaxed); }

void step() {
  {
    OpenRecordings& registry = open_recordings();
    std::lock_guard guard(registry.mutex);
    ++registry.step;
    for (Recording::Impl* recording : registry.recordings) recording->step_boundary(registry.step);
  }
  // Outside the recordings' lock: a device that maps its plan reports it to its recording, which takes that lock.
  engine::announce_step();
}

int current_step() {
  OpenRecordings& registry = open_recordings();
  std::lock_guard guard(registry.mutex);
  return registry.step;
}

}  // namespace plimsoll
