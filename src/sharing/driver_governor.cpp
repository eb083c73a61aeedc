#include "sharing/driver_governor.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include <fmt/format.h>

#include "plimsoll/error.hpp"
#include "plimsoll/size.hpp"
#include "sharing/ledger_snapshot.hpp"
#include "sharing/process_identity.hpp"
#include "sharing/refusal_report.hpp"
#include "sharing/settings.hpp"
#include "sharing/share_view.hpp"

namespace plimsoll::sharing {

namespace cu = cuda_driver;

struct DriverGovernor::Device {
  int ordinal = 0;
  std::string uuid;
  std::optional<Ledger> ledger;  // empty: refused (no share, or the ledger could not be joined)
  int slot = -1;
  std::uint64_t cap = 0;
  std::uint64_t total = 0;       // the GPU's memory as the driver reported it at the join
  std::string problem;           // why `ledger` is empty
  std::once_flag context_measured;
  std::atomic<bool> measured{false};
  std::atomic<bool> holds_token{false};
};

std::string format_gpu_uuid(const cu::Uuid& uuid) {
  const unsigned char* b = uuid.bytes;
  return fmt::format("GPU-{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}",
                     b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
                     b[15]);
}

DriverGovernor::DriverGovernor(std::vector<ShareSpec> specs, DriverCalls driver, std::string ledger_dir)
    : specs_(std::move(specs)), driver_(driver), ledger_dir_(std::move(ledger_dir)), trim_wait_(trim_wait()), me_(this_process()) {}

std::unique_ptr<DriverGovernor> DriverGovernor::from_environment(DriverCalls driver) {
  const char* text = std::getenv("PLIMSOLL_SHARE");
  std::vector<ShareSpec> specs;
  std::string problem;
  if (text != nullptr && *text != '\0') {
    try {
      specs = parse_share_specs(text);
    } catch (const std::exception& error) {
      problem = fmt::format("PLIMSOLL_SHARE is not usable ({}), so no GPU memory is given to this job", error.what());
    }
  }
  auto governor = std::make_unique<DriverGovernor>(std::move(specs), driver, ledger_directory());
  governor->config_problem_ = std::move(problem);
  return governor;
}

DriverGovernor::~DriverGovernor() {
  for (const auto& device : devices_)
    if (device && device->ledger) device->ledger->leave(device->slot);
}

std::optional<int> DriverGovernor::current_device() const {
  cu::Device device = 0;
  if (driver_.ctx_get_device == nullptr || driver_.ctx_get_device(&device) != cu::kSuccess) return std::nullopt;
  return device;
}

void DriverGovernor::report_once(const std::string& text) {
  if (reported_.exchange(true)) return;
  std::fputs(text.c_str(), stderr);
  std::fflush(stderr);
}

void DriverGovernor::lock_for_fork() noexcept {
  fork_locking_.store(true, std::memory_order_release);
  devices_mutex_.lock();  // NOLINT: released by unlock_after_fork
  addresses_.lock_for_fork();
  handles_.lock_for_fork();
}

void DriverGovernor::unlock_after_fork() noexcept {
  handles_.unlock_after_fork();
  addresses_.unlock_after_fork();
  devices_mutex_.unlock();
  fork_locking_.store(false, std::memory_order_release);
}

DriverGovernor::Device* DriverGovernor::device(int ordinal) {
  if (ordinal < 0 || ordinal >= kMaxDevices) return nullptr;
  if (Device* known = by_ordinal_[ordinal].load(std::memory_order_acquire)) return known;
  const std::lock_guard lock(devices_mutex_);
  if (Device* known = by_ordinal_[ordinal].load(std::memory_order_acquire)) return known;
  Device& d = *devices_.emplace_back(std::make_unique<Device>());
  d.ordinal = ordinal;
  join(d);
  by_ordinal_[ordinal].store(&d, std::memory_order_release);
  return &d;
}

void DriverGovernor::join(Device& d) {
  const int ordinal = d.ordinal;
  const auto spec = std::find_if(specs_.begin(), specs_.end(), [&](const ShareSpec& s) { return s.device == ordinal; });
  if (!config_problem_.empty()) {
    d.problem = config_problem_;
    return;
  }
  if (spec == specs_.end()) {
    d.problem = fmt::format("this job has no share of cuda:{} (PLIMSOLL_SHARE names only the GPUs it may use; hide the "
                            "others with CUDA_VISIBLE_DEVICES)", ordinal);
    return;
  }
  try {
    cu::Uuid uuid{};
    std::size_t total = 0;
    if (driver_.device_get_uuid(&uuid, ordinal) != cu::kSuccess || driver_.device_total_mem(&total, ordinal) != cu::kSuccess)
      throw Error(fmt::format("the driver could not name cuda:{} (cuDeviceGetUuid / cuDeviceTotalMem failed)", ordinal));
    d.uuid = format_gpu_uuid(uuid);
    Ledger ledger(LedgerFile::open_or_create(ledger_dir_, d.uuid, total));
    const auto [share, cap] = spec->resolve(ledger.limit());
    d.slot = ledger.join(Member{.who = me_, .share = share, .cap = cap, .can_trim = false, .interposed = true,
                                .command = command_of(me_.pid)});
    d.cap = cap;
    d.total = total;
    d.ledger.emplace(std::move(ledger));
  } catch (const std::exception& error) {
    d.problem = error.what();
  }
}

cu::Result DriverGovernor::admit(int ordinal, std::uint64_t bytes, const char* call) {
  Device* d = device(ordinal);
  if (d == nullptr) return cu::kErrorInvalidValue;
  context_created(ordinal);  // once: a context made some way the shell does not intercept is counted here
  if (!d->ledger) {
    report_once(fmt::format("plimsoll: {} of {} refused on cuda:{}: {}\n", call, format_size(bytes), ordinal,
                            d->problem));
    return cu::kErrorOutOfMemory;
  }
  const ChargeResult result = charge_waiting_for_trims(*d->ledger, d->slot, bytes, trim_wait_);
  if (result.verdict == Verdict::admitted) return cu::kSuccess;
  if (!reported_.load()) {
    const Refusal refusal{.call = call, .device = ordinal, .bytes = bytes, .verdict = result.verdict,
                          .headroom = result.headroom, .pid = static_cast<int>(::getpid())};
    report_once(refusal_report(refusal, read_snapshot(d->ledger->file())));
  }
  return cu::kErrorOutOfMemory;
}

void DriverGovernor::cancel(int ordinal, std::uint64_t bytes) noexcept {
  Device* d = device(ordinal);
  if (d != nullptr && d->ledger) d->ledger->release(d->slot, bytes);
}

void DriverGovernor::remember(std::uint64_t key, int ordinal, std::uint64_t bytes, bool is_handle) {
  (is_handle ? handles_ : addresses_).insert(key, Charged{.device = ordinal, .bytes = bytes});
}

std::optional<Charged> DriverGovernor::take(std::uint64_t key, bool is_handle) noexcept {
  try {
    return (is_handle ? handles_ : addresses_).take(key);
  } catch (...) {
    return std::nullopt;
  }
}

void DriverGovernor::context_created(int ordinal) {
  Device* d = device(ordinal);
  if (d == nullptr || !d->ledger) return;
  std::call_once(d->context_measured, [&] {
    // The driver's free memory right after the context exists, less what every other governed process holds, is
    // what this process holds: its context (it has allocated nothing yet). Memory held by processes plimsoll does
    // not govern would count here too; PLIMSOLL_SHARE_CONTEXT_BYTES then gives the cost instead.
    std::uint64_t cost = 0;
    if (const auto fixed = context_bytes_override()) {
      cost = *fixed;
    } else {
      std::size_t free_bytes = 0, total_bytes = 0;
      if (driver_.mem_get_info(&free_bytes, &total_bytes) != cu::kSuccess) return;
      const std::uint64_t used = total_bytes > free_bytes ? total_bytes - free_bytes : 0;
      // Dead processes' entries first: the driver no longer counts their memory, so neither may the ledger here.
      d->ledger->reclaim_dead();
      const std::uint64_t others = d->ledger->others_charged(d->slot);
      const std::uint64_t mine = d->ledger->charged(d->slot);
      cost = used > others + mine ? used - others - mine : 0;
    }
    d->ledger->charge_unconditionally(d->slot, cost, true);
    d->measured.store(true);
  });
  context_done(ordinal);
}

void DriverGovernor::context_creating(int ordinal) {
  Device* d = device(ordinal);
  if (d == nullptr || !d->ledger || d->measured.load() || d->holds_token.load()) return;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!d->ledger->take_context_token(me_)) {
    // A holder that takes longer than any context creation is stuck, not dead: go ahead and measure anyway.
    if (std::chrono::steady_clock::now() > deadline) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  d->holds_token.store(true);
}

void DriverGovernor::context_done(int ordinal) noexcept {
  Device* d = ordinal >= 0 && ordinal < kMaxDevices ? by_ordinal_[ordinal].load() : nullptr;
  if (d != nullptr && d->ledger && d->holds_token.exchange(false)) d->ledger->release_context_token(me_);
}

std::optional<std::pair<std::size_t, std::size_t>> DriverGovernor::memory_info(int ordinal, std::size_t driver_free) {
  Device* d = device(ordinal);
  if (d == nullptr || !d->ledger) return std::nullopt;
  const GpuMemoryView seen =
      seen_under_share({.free_bytes = driver_free, .total_bytes = d->total}, d->cap, d->ledger->headroom(d->slot));
  return std::pair<std::size_t, std::size_t>{seen.free_bytes, seen.total_bytes};
}

std::optional<std::size_t> DriverGovernor::total_memory(int ordinal) {
  Device* d = device(ordinal);
  if (d == nullptr || !d->ledger) return std::nullopt;
  return seen_under_share({.free_bytes = 0, .total_bytes = d->total}, d->cap, 0).total_bytes;
}

}  // namespace plimsoll::sharing
