#pragma once
// Timelines as one self-contained HTML page: the SVG charts of timeline_svg.hpp, their samples as JSON, and a
// small script for zooming and hover tooltips. No network, no external library.
#include <string>
#include <vector>

#include "telemetry/replay/timeline.hpp"

namespace plimsoll::telemetry {

/// A page with one chart per timeline, in the order given. Its script adds <div id="plimsoll-ready"> once every
/// chart is set up, and reports script errors in <div id="plimsoll-error">.
std::string timeline_html(const std::vector<Timeline>& timelines);

}  // namespace plimsoll::telemetry
