// Fuzzes DeviceName::parse: anything it accepts must print to a canonical name that parses back to itself.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "plimsoll/device.hpp"
#include "plimsoll/error.hpp"

namespace {

void require(bool holds, const char* invariant, std::string_view input) {
  if (holds) return;
  std::fprintf(stderr, "invariant broken: %s\ninput: \"%.*s\"\n", invariant, static_cast<int>(input.size()),
               input.data());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  plimsoll::DeviceName name;
  try {
    name = plimsoll::DeviceName::parse(text);
  } catch (const plimsoll::InvalidArgument&) {
    return 0;  // rejecting is fine; any other exception or a crash is the bug being hunted
  }

  const std::string printed = name.str();
  const plimsoll::DeviceName reparsed = plimsoll::DeviceName::parse(printed);
  require(reparsed == name, "parse(str(x)) == x", text);
  require(reparsed.str() == printed, "str() is canonical", text);

  require(name.logical >= -1, "logical is -1 or an index", text);
  require((name.logical >= 0) == (text.find('/') != std::string_view::npos), "only a '/' names a logical device",
          text);
  require(name.physical().logical == -1 && name.physical().kind == name.kind, "physical() keeps the device", text);
  switch (name.kind) {
    case plimsoll::DeviceKind::cpu:
      require(name.index == 0 && name.sim_bytes == 0, "cpu has no index or size", text);
      break;
    case plimsoll::DeviceKind::cuda:
      require(name.index >= 0 && name.sim_bytes == 0, "cuda has an index and no size", text);
      break;
    case plimsoll::DeviceKind::sim:
      require(name.index == 0 && name.sim_bytes > 0, "sim has a size above 0", text);
      break;
  }
  return 0;
}
