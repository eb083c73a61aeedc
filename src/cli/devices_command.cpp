// `plimsoll devices`: what plimsoll would use, with the limits the current configuration (environment
// included) gives, and why each GPU is or is not visible. Creates no device.
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "cli/output.hpp"
#include "plimsoll/policy.hpp"
#include "plimsoll/runtime.hpp"
#include "plimsoll/size.hpp"

namespace {

std::string describe_policy(const plimsoll::Policy& policy) {
  std::string text(plimsoll::to_string(policy.growth));
  if (policy.memory_limit) text += fmt::format(", limit {}", plimsoll::format_size(*policy.memory_limit));
  if (policy.memory_fraction) text += fmt::format(", fraction {}", *policy.memory_fraction);
  if (policy.reserve) text += fmt::format(", reserve {}", plimsoll::format_size(*policy.reserve));
  if (policy.release_threshold) {
    text += fmt::format(", keep {} cached", plimsoll::format_size(*policy.release_threshold));
  }
  if (policy.thread_cache) text += fmt::format(", thread cache {}", plimsoll::format_size(*policy.thread_cache));
  return text;
}

template <typename T>
nlohmann::ordered_json optional_json(const std::optional<T>& value) {
  return value ? nlohmann::ordered_json(*value) : nlohmann::ordered_json(nullptr);
}

nlohmann::ordered_json policy_json(const plimsoll::Policy& policy) {
  return {{"growth", std::string(plimsoll::to_string(policy.growth))},
          {"memory_limit_bytes", optional_json(policy.memory_limit)},
          {"memory_fraction", optional_json(policy.memory_fraction)},
          {"reserve_bytes", optional_json(policy.reserve)},
          {"release_threshold_bytes", optional_json(policy.release_threshold)},
          {"thread_cache_bytes", optional_json(policy.thread_cache)}};
}

// Keys in the order written (ordered_json): each device's name comes first, as in the table.
void print_json(const std::vector<plimsoll::DeviceListing>& devices, const std::vector<std::string>& visibility) {
  nlohmann::ordered_json document{{"devices", nlohmann::ordered_json::array()}, {"visibility", visibility}};
  for (const plimsoll::DeviceListing& device : devices) {
    document["devices"].push_back({{"name", device.name},
                                   {"hardware", device.hardware},
                                   {"total_bytes", device.total_bytes},
                                   {"free_bytes", device.free_bytes},
                                   {"limit_bytes", device.limit_bytes},
                                   {"policy", policy_json(device.policy)},
                                   {"details", device.details}});
  }
  fmt::print("{}\n", document.dump(2));
}

void print_table(const std::vector<plimsoll::DeviceListing>& devices, const std::vector<std::string>& visibility) {
  using plimsoll::cli::Table;
  Table table({{"device"},
               {"hardware"},
               {"total", Table::Align::right},
               {"free", Table::Align::right},
               {"limit", Table::Align::right},
               {"policy"},
               {"details"}});
  for (const plimsoll::DeviceListing& device : devices) {
    table.add_row({device.name, device.hardware, plimsoll::format_size(device.total_bytes),
                   plimsoll::format_size(device.free_bytes), plimsoll::format_size(device.limit_bytes),
                   describe_policy(device.policy), device.details});
  }
  fmt::print("{}\nVisibility:\n", table.render());
  for (const std::string& line : visibility) fmt::print("  {}\n", line);
}

}  // namespace

void add_devices_command(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  CLI::App* command = app.add_subcommand(
      "devices", "List the host, the visible GPUs and configured logical devices with the limits plimsoll "
                 "would give them, and explain CUDA_VISIBLE_DEVICES / PLIMSOLL_VISIBLE_DEVICES");
  command->add_flag("--json", *json, "Print one JSON object {\"devices\": [...], \"visibility\": [...]}");
  command->callback([json] {
    const plimsoll::Runtime& runtime = plimsoll::Runtime::global();
    const std::vector<plimsoll::DeviceListing> devices = runtime.list_devices();
    const std::vector<std::string> visibility = runtime.visibility_report();
    if (*json) {
      print_json(devices, visibility);
    } else {
      print_table(devices, visibility);
    }
  });
}
