#include "telemetry/render/timeline_axis.hpp"

#include <cmath>

#include <fmt/format.h>

namespace plimsoll::telemetry {
namespace {

const AxisUnit& unit_for(AxisKind kind, double magnitude) {
  const std::vector<AxisUnit>& units = axis_units(kind);
  std::size_t chosen = 0;
  while (chosen + 1 < units.size() && units[chosen + 1].scale <= magnitude) ++chosen;
  return units[chosen];
}

std::string with_unit(AxisKind kind, double in_unit, const AxisUnit& unit) {
  // Zero needs no unit: "0" rather than "0k" or "0 MiB" where the axis starts.
  if (in_unit == 0) return "0";
  // Event counts read as "20k"; bytes and times with a blank, as format_size writes them.
  const std::string_view blank = kind == AxisKind::events || unit.suffix.empty() ? "" : " ";
  return fmt::format("{:.4g}{}{}", in_unit, blank, unit.suffix);
}

}  // namespace

const std::vector<AxisUnit>& axis_units(AxisKind kind) {
  static const std::vector<AxisUnit> bytes{
      {1, "B"}, {1024.0, "KiB"}, {1024.0 * 1024, "MiB"}, {1024.0 * 1024 * 1024, "GiB"}, {1024.0 * 1024 * 1024 * 1024, "TiB"}};
  static const std::vector<AxisUnit> times{{1, "ns"}, {1e3, "\u00b5s"}, {1e6, "ms"}, {1e9, "s"}};
  static const std::vector<AxisUnit> events{{1, ""}, {1e3, "k"}, {1e6, "M"}, {1e9, "G"}};
  switch (kind) {
    case AxisKind::bytes: return bytes;
    case AxisKind::time_ns: return times;
    case AxisKind::events: return events;
  }
  return events;
}

std::vector<AxisTick> axis_ticks(AxisKind kind, double from, double to, std::size_t target) {
  if (!(to > from) || target == 0) return {{from, axis_label(kind, from)}};
  const AxisUnit& unit = unit_for(kind, to - from);
  const double raw_step = (to - from) / unit.scale / static_cast<double>(target);
  const double power = std::pow(10.0, std::floor(std::log10(raw_step)));
  const double fraction = raw_step / power;
  const double step = (fraction <= 1 ? 1 : fraction <= 2 ? 2 : fraction <= 5 ? 5 : 10) * power;
  std::vector<AxisTick> ticks;
  const double first = std::ceil(from / unit.scale / step);
  for (double index = first; index * step * unit.scale <= to * (1 + 1e-12); ++index) {
    const double in_unit = index * step;
    ticks.push_back({in_unit * unit.scale, with_unit(kind, in_unit, unit)});
  }
  return ticks;
}

std::string axis_label(AxisKind kind, double value) {
  const AxisUnit& unit = unit_for(kind, std::abs(value));
  return with_unit(kind, value / unit.scale, unit);
}

}  // namespace plimsoll::telemetry
