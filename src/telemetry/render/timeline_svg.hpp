#pragma once
// Timelines as SVG: the --plot file, and the charts the --html page is built around.
#include <cstddef>
#include <string>
#include <vector>

#include "telemetry/replay/timeline.hpp"

namespace plimsoll::telemetry {

inline constexpr double kChartWidth = 1200;
inline constexpr double kChartHeight = 440;

/// One chart as an <svg> element, `top` pixels down inside an outer SVG. `id` keeps its ids unique within a
/// document. Classes and data- attributes (plot area, x domain) are what the HTML page's script works with.
std::string timeline_chart_svg(const Timeline& timeline, std::size_t id, double top = 0);
/// A whole SVG document: every timeline's chart, one under another, in the order given.
std::string timeline_svg(const std::vector<Timeline>& timelines);

/// Escapes text for XML content and attribute values.
std::string xml_escape(std::string_view text);

}  // namespace plimsoll::telemetry
