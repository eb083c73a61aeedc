#pragma once
// Axis ticks for timeline charts: round steps (1, 2 or 5 times a power of ten) in the unit that fits the span,
// IEC units for bytes (KiB, MiB, GiB), s/ms/µs/ns for times, k/M/G for event counts. The SVG and the HTML
// chart both take their ticks from here; the HTML page gets the unit tables to label ticks after a zoom.
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace plimsoll::telemetry {

enum class AxisKind { bytes, time_ns, events };

struct AxisUnit {
  double scale = 1;  // axis values per unit
  std::string_view suffix;
};

struct AxisTick {
  double value = 0;
  std::string label;
};

/// Units of `kind`, smallest first.
const std::vector<AxisUnit>& axis_units(AxisKind kind);
/// Between `target` and about 2 * `target` ticks covering [from, to], labelled in the largest unit not larger
/// than the span ("512 MiB", "1.5 GiB", "200 ms", "20k").
std::vector<AxisTick> axis_ticks(AxisKind kind, double from, double to, std::size_t target = 6);
/// One value in the largest unit not larger than it, to four significant digits ("1.25 GiB", "340 ms"); zero
/// is "0" in every unit.
std::string axis_label(AxisKind kind, double value);

}  // namespace plimsoll::telemetry
