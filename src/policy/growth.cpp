#include <fmt/format.h>

#include "plimsoll/error.hpp"
#include "plimsoll/policy.hpp"

namespace plimsoll {

std::string_view to_string(Growth growth) {
  switch (growth) {
    case Growth::preallocate:
      return "preallocate";
    case Growth::on_demand:
      return "on_demand";
  }
  return "unknown";  // only reachable through a cast of a value outside the enum
}

Growth parse_growth(std::string_view text) {
  if (text == "preallocate") return Growth::preallocate;
  if (text == "on_demand") return Growth::on_demand;
  throw InvalidArgument(fmt::format(
      "invalid growth \"{}\": expected \"preallocate\" (take the whole budget at start) or \"on_demand\" (grow as "
      "needed)",
      text));
}

}  // namespace plimsoll
