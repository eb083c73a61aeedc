// libFuzzer target: parse_config_json on arbitrary bytes. Bad input must come back as InvalidArgument, never as a
// crash, a hang, a sanitizer report or any other exception (which libFuzzer reports as a crash).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "plimsoll/error.hpp"
#include "plimsoll/policy.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const plimsoll::Config config = plimsoll::parse_config_json(text, "fuzz");
    // Whatever was accepted must be usable as it stands.
    config.default_policy.validate();
    for (const auto& [device, policy] : config.device_policies) {
      policy.validate();
      (void)config.policy_for(plimsoll::DeviceName::parse(device));
    }
  } catch (const plimsoll::InvalidArgument&) {
    // The documented way to refuse a config.
  }
  return 0;
}
