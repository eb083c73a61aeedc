#include "telemetry/recording/call_sites.hpp"

#include <unwind.h>

#include <algorithm>
#include <array>

#include <fmt/format.h>

#include "plimsoll/error.hpp"
#include "plimsoll/site_source.hpp"

namespace plimsoll {

namespace {
std::atomic<const InterpreterSiteSource*> interpreter_source{nullptr};
}  // namespace

void set_interpreter_site_source(const InterpreterSiteSource* source) noexcept {
  interpreter_source.store(source, std::memory_order_release);
}

}  // namespace plimsoll

namespace plimsoll::telemetry {

struct CallSites::Stack {
  std::uint64_t hash = 0;
  std::uint32_t id = 0;
  std::uint32_t depth = 0;
  std::array<std::uintptr_t, kMaxFrames> frames{};
  // An interpreter frame's site is named when first seen (its code object may be gone by close()); native
  // stacks are named on demand. An interpreter "stack" is {0, code, line}: no return address is 0.
  std::string interpreter_name;
};

// Open addressing with linear probing. Slots only ever go from empty to a stack, never back, so a reader that
// meets an empty slot knows the stack is not in this table.
struct CallSites::Table {
  explicit Table(std::size_t slot_count)
      : mask(slot_count - 1), slots(std::make_unique<std::atomic<const Stack*>[]>(slot_count)) {}
  std::size_t slot_count() const { return mask + 1; }

  std::size_t mask;
  std::unique_ptr<std::atomic<const Stack*>[]> slots;
};

namespace {

constexpr std::size_t kInitialSlots = 1024;  // a power of two

struct UnwindWalk {
  std::uintptr_t* frames;
  std::uint32_t depth;
  int skip;
};

_Unwind_Reason_Code collect_frame(_Unwind_Context* context, void* walk_state) {
  auto& walk = *static_cast<UnwindWalk*>(walk_state);
  if (walk.skip > 0) {
    --walk.skip;
    return _URC_NO_REASON;
  }
  const std::uintptr_t return_address = _Unwind_GetIP(context);
  if (return_address == 0) return _URC_END_OF_STACK;
  walk.frames[walk.depth++] = return_address;
  return walk.depth == CallSites::kMaxFrames ? _URC_END_OF_STACK : _URC_NO_REASON;
}

std::uint64_t hash_frames(const std::uintptr_t* frames, std::uint32_t depth) {
  std::uint64_t hash = 0x9e3779b97f4a7c15ULL ^ depth;
  for (std::uint32_t i = 0; i < depth; ++i) {
    hash = (hash ^ frames[i]) * 0xff51afd7ed558ccdULL;
    hash ^= hash >> 32;
  }
  return hash;
}

}  // namespace

CallSites::CallSites(std::size_t max_stacks) : max_stacks_(max_stacks) {
  tables_.push_back(std::make_unique<Table>(kInitialSlots));
  table_.store(tables_.back().get(), std::memory_order_release);
}

CallSites::~CallSites() = default;

std::uint32_t CallSites::capture(int skip) {
  if (const InterpreterSiteSource* source = interpreter_source.load(std::memory_order_acquire)) {
    InterpreterFrame frame;
    if (source->innermost(frame)) return capture_interpreter(*source, frame);
  }
  // _Unwind_Backtrace rather than glibc's backtrace(): both walk with libgcc's unwinder at the same cost, but
  // backtrace() loads libgcc_s with dlopen on its first call (allocating, under the loader lock), which an
  // allocator hook had better not do; and the skipped frames are dropped as they are walked.
  std::array<std::uintptr_t, kMaxFrames> frames;  // only [0, depth) is read
  UnwindWalk walk{frames.data(), 0, 1 + std::max(skip, 0)};  // 1: this function's own frame
  _Unwind_Backtrace(collect_frame, &walk);
  if (walk.depth == 0) return 0;

  const std::uint64_t hash = hash_frames(frames.data(), walk.depth);
  if (const Stack* known = find(*table_.load(std::memory_order_acquire), hash, frames.data(), walk.depth)) {
    return known->id;
  }
  return insert(hash, frames.data(), walk.depth, {});
}

std::uint32_t CallSites::capture_interpreter(const InterpreterSiteSource& source, const InterpreterFrame& frame) {
  const std::array<std::uintptr_t, 3> key{0, frame.code, frame.line};
  const std::uint64_t hash = hash_frames(key.data(), key.size());
  if (const Stack* known = find(*table_.load(std::memory_order_acquire), hash, key.data(), key.size())) {
    return known->id;
  }
  return insert(hash, key.data(), key.size(), [&] { return source.describe(frame); });
}

const CallSites::Stack* CallSites::find(const Table& table, std::uint64_t hash, const std::uintptr_t* frames,
                                        std::uint32_t depth) noexcept {
  for (std::size_t slot = hash & table.mask;; slot = (slot + 1) & table.mask) {
    const Stack* stack = table.slots[slot].load(std::memory_order_acquire);
    if (stack == nullptr) return nullptr;
    if (stack->hash == hash && stack->depth == depth && std::equal(frames, frames + depth, stack->frames.data())) {
      return stack;
    }
  }
}

std::uint32_t CallSites::insert(std::uint64_t hash, const std::uintptr_t* frames, std::uint32_t depth,
                                const std::function<std::string()>& interpreter_name) {
  const std::lock_guard lock(insert_mutex_);
  Table* table = table_.load(std::memory_order_relaxed);
  // Another thread may have added this stack since the lock-free lookup.
  if (const Stack* known = find(*table, hash, frames, depth)) return known->id;
  if (stacks_.size() >= max_stacks_) return 0;
  // At most half full, so probes stay short and always end at an empty slot.
  if ((stacks_.size() + 1) * 2 > table->slot_count()) table = &grow_table();

  // Every allocation before the stack is published: out of host memory (capture() runs inside a device's noexcept
  // try_allocate) nothing is left half made, and a published stack is always owned.
  if (stacks_.size() == stacks_.capacity()) stacks_.reserve(std::max<std::size_t>(64, stacks_.capacity() * 2));
  auto stack = std::make_unique<Stack>();
  stack->hash = hash;
  stack->id = static_cast<std::uint32_t>(stacks_.size() + 1);
  stack->depth = depth;
  std::copy(frames, frames + depth, stack->frames.begin());
  if (interpreter_name) stack->interpreter_name = interpreter_name();
  std::size_t slot = hash & table->mask;
  while (table->slots[slot].load(std::memory_order_relaxed) != nullptr) slot = (slot + 1) & table->mask;
  // Release: a reader that sees the pointer sees the stack's contents.
  table->slots[slot].store(stack.get(), std::memory_order_release);
  stacks_.push_back(std::move(stack));
  return stacks_.back()->id;
}

CallSites::Table& CallSites::grow_table() {
  auto bigger = std::make_unique<Table>(table_.load(std::memory_order_relaxed)->slot_count() * 2);
  for (const auto& stack : stacks_) {
    std::size_t slot = stack->hash & bigger->mask;
    while (bigger->slots[slot].load(std::memory_order_relaxed) != nullptr) slot = (slot + 1) & bigger->mask;
    bigger->slots[slot].store(stack.get(), std::memory_order_relaxed);
  }
  tables_.push_back(std::move(bigger));
  table_.store(tables_.back().get(), std::memory_order_release);
  return *tables_.back();
}

std::size_t CallSites::size() const {
  const std::lock_guard lock(insert_mutex_);
  return stacks_.size();
}

const CallSites::Stack& CallSites::stack_of(std::uint32_t id) const {
  if (id == 0 || id > stacks_.size()) {
    throw InvalidArgument(fmt::format("call site id {} is not one that capture() returned (ids run from 1 to {}); "
                                      "pass an id from this CallSites",
                                      id, stacks_.size()));
  }
  return *stacks_[id - 1];
}

std::vector<std::uintptr_t> CallSites::frames(std::uint32_t id) const {
  if (id == 0) return {};
  const std::lock_guard lock(insert_mutex_);
  const Stack& stack = stack_of(id);
  return {stack.frames.begin(), stack.frames.begin() + stack.depth};
}

CallSiteSymbolizer& CallSites::symbolizer() {
  if (!symbolizer_) symbolizer_ = std::make_unique<CallSiteSymbolizer>();
  return *symbolizer_;
}

std::string CallSites::describe_locked(const Stack& stack) {
  if (is_interpreter(stack)) return stack.interpreter_name;
  // Frames are symbolized only up to the call site: the rest of the stack may never be asked for.
  for (std::uint32_t i = 0; i < stack.depth; ++i) {
    const SiteFrame& frame = symbolizer().resolve(stack.frames[i]);
    if (!frame.internal) return format_site_frame(frame);
  }
  return "";
}

std::string CallSites::describe(std::uint32_t id) {
  if (id == 0) return "";
  const Stack* stack = nullptr;
  {
    const std::lock_guard lock(insert_mutex_);
    stack = &stack_of(id);  // stacks never move or go while the CallSites lives
  }
  const std::lock_guard lock(symbolize_mutex_);
  return describe_locked(*stack);
}

std::string CallSites::interpreter_name(std::uint32_t id) const {
  if (id == 0) return "";
  const std::lock_guard lock(insert_mutex_);
  const Stack& stack = stack_of(id);
  return is_interpreter(stack) ? stack.interpreter_name : std::string();
}

bool CallSites::is_interpreter(const Stack& stack) { return stack.depth > 0 && stack.frames[0] == 0; }

std::vector<SiteFrame> CallSites::stack(std::uint32_t id) {
  const std::vector<std::uintptr_t> addresses = frames(id);
  if (!addresses.empty() && addresses[0] == 0) {
    // An interpreter frame: one frame, named as the source named it.
    SiteFrame frame;
    frame.function = describe(id);
    return {frame};
  }
  const std::lock_guard lock(symbolize_mutex_);
  std::vector<SiteFrame> symbolized;
  symbolized.reserve(addresses.size());
  for (const std::uintptr_t address : addresses) symbolized.push_back(symbolizer().resolve(address));
  return symbolized;
}

std::vector<std::string> CallSites::symbolize_all() {
  std::vector<const Stack*> stacks;
  {
    const std::lock_guard lock(insert_mutex_);
    stacks.reserve(stacks_.size());
    for (const auto& stack : stacks_) stacks.push_back(stack.get());
  }
  const std::lock_guard lock(symbolize_mutex_);
  std::vector<std::string> names{""};
  names.reserve(stacks.size() + 1);
  for (const Stack* stack : stacks) names.push_back(describe_locked(*stack));
  return names;
}

void CallSites::lock_for_fork() noexcept {
  symbolize_mutex_.lock();
  insert_mutex_.lock();
}

void CallSites::unlock_after_fork() noexcept {
  insert_mutex_.unlock();
  symbolize_mutex_.unlock();
}

}  // namespace plimsoll::telemetry
