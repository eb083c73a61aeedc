// Tag names are interned once into small integers so every allocation carries two bytes, not a string.
#include <atomic>
#include <deque>
#include <mutex>
#include <string>
#include <unordered_map>

#include "engine/tag_table.hpp"
#include "plimsoll/allocator.hpp"
#include "plimsoll/error.hpp"

namespace plimsoll {

namespace {
struct TagTable {
  std::mutex mutex;
  std::deque<std::string> names{""};  // deque: references stay valid as it grows
  std::unordered_map<std::string, Tag> ids;
};
TagTable& table() {
  static TagTable instance;
  return instance;
}
std::atomic<void (*)()> new_tag_seam{nullptr};
}  // namespace

Tag intern_tag(std::string_view name) {
  if (name.empty()) return kUntagged;
  TagTable& t = table();
  std::lock_guard lock(t.mutex);
  auto found = t.ids.find(std::string(name));
  if (found != t.ids.end()) return found->second;
  if (auto* seam = new_tag_seam.load(std::memory_order_acquire)) seam();
  // Tag 0xFFFF is the per-thread caches' own (engine::kFrontTag, thread_cache.hpp): the program's stop below it.
  if (t.names.size() >= 0xFFFF)
    throw InvalidArgument("too many distinct tags (65534, the most a process can name); reuse tag names");
  Tag tag = static_cast<Tag>(t.names.size());
  t.names.emplace_back(name);
  t.ids.emplace(std::string(name), tag);
  return tag;
}

std::string_view tag_name(Tag tag) {
  TagTable& t = table();
  std::lock_guard lock(t.mutex);
  return tag < t.names.size() ? std::string_view(t.names[tag]) : std::string_view("?");
}

namespace engine {

void make_tag_table_for_fork() { (void)table(); }

void lock_tag_table_for_fork() noexcept {
  table().mutex.lock();  // NOLINT: released by unlock_tag_table_after_fork, after the fork
}

void unlock_tag_table_after_fork() noexcept { table().mutex.unlock(); }

void set_new_tag_seam(void (*seam)()) noexcept { new_tag_seam.store(seam, std::memory_order_release); }

}  // namespace engine
}  // namespace plimsoll
