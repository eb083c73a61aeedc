#include "telemetry/render/timeline_svg.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <string_view>

#include <fmt/format.h>

#include "plimsoll/size.hpp"
#include "telemetry/render/timeline_axis.hpp"

namespace plimsoll::telemetry {
namespace {

constexpr double kLeft = 90;
constexpr double kRight = 24;
constexpr double kTop = 70;
constexpr double kBottom = 44;
// Marker lines get a text label only when there are few of them; the rest show their text on hover.
constexpr std::size_t kLabelledMarks = 12;
constexpr std::size_t kLabelledSteps = 60;
constexpr std::size_t kMarkLabelChars = 40;
constexpr double kLimitInViewRatio = 1.5;
constexpr std::string_view kLimitDashes = "6 4";

constexpr std::string_view kInUseColor = "#2b6cb0";
constexpr std::string_view kReservedColor = "#dd6b20";
constexpr std::string_view kOomColor = "#c53030";
constexpr std::array<std::string_view, 10> kTagColors{"#90cdf4", "#9ae6b4", "#fbd38d", "#d6bcfa", "#feb2b2",
                                                      "#81e6d9", "#fbb6ce", "#c6f6d5", "#e2e8f0", "#faf089"};

// Data to pixels. x starts at 0: the first event, or the start of the recording for timed traces.
struct Frame {
  double x_end = 1;
  double y_max = 1;
  double left = kLeft;
  double right = kChartWidth - kRight;
  double top = kTop;
  double bottom = kChartHeight - kBottom;

  double px(std::uint64_t x) const { return round(left + static_cast<double>(x) / x_end * (right - left)); }
  double py(double bytes) const { return round(bottom - bytes / y_max * (bottom - top)); }
  static double round(double pixels) { return std::round(pixels * 10) / 10; }
};

// The limit is drawn only when it is near the data: a 16 GiB device under a 200 MiB trace would flatten it.
bool limit_in_view(const Timeline& timeline) {
  const double peak = static_cast<double>(std::max(timeline.peak_in_use(), timeline.peak_reserved()));
  return timeline.limit_bytes > 0 && static_cast<double>(timeline.limit_bytes) <= peak * kLimitInViewRatio;
}

Frame frame_for(const Timeline& timeline) {
  Frame frame;
  frame.x_end = std::max(1.0, static_cast<double>(timeline.end_x));
  // Headroom over the highest line, so the peak does not touch the title.
  double top = static_cast<double>(std::max(timeline.peak_in_use(), timeline.peak_reserved()));
  if (limit_in_view(timeline)) top = std::max(top, static_cast<double>(timeline.limit_bytes));
  frame.y_max = std::max(1024.0, top * 1.08);
  return frame;
}

// Named in the legend: a label on the line would cross the data that runs into the limit.
std::string limit_line(const Timeline& timeline, const Frame& frame) {
  if (!limit_in_view(timeline)) return {};
  const double y = frame.py(static_cast<double>(timeline.limit_bytes));
  return fmt::format(R"(<line class="limit" x1="{}" x2="{}" y1="{}" y2="{}" stroke="{}" stroke-dasharray="{}">)"
                     R"(<title>limit {}</title></line>)",
                     frame.left, frame.right, y, y, kOomColor, kLimitDashes, format_size(timeline.limit_bytes));
}

AxisKind x_axis_kind(const Timeline& timeline) { return timeline.has_times ? AxisKind::time_ns : AxisKind::events; }

struct Point {
  double x;
  double y;
};

// Memory holds its value until the next event, so samples join as steps; the last holds to the end of the replay.
// `value(i)` is the bytes drawn for sample i.
template <typename Value>
std::vector<Point> step_line(const Timeline& timeline, const Frame& frame, Value value) {
  std::vector<Point> points;
  points.reserve(timeline.samples.size() * 2 + 1);
  for (std::size_t i = 0; i < timeline.samples.size(); ++i) {
    const double x = frame.px(timeline.samples[i].x);
    if (!points.empty()) points.push_back({x, points.back().y});
    points.push_back({x, frame.py(static_cast<double>(value(i)))});
  }
  if (!points.empty()) points.push_back({frame.px(timeline.end_x), points.back().y});
  return points;
}

// SVG path data, with H and V where a step allows (half the size of L everywhere).
std::string path_data(const std::vector<Point>& points) {
  std::string data;
  data.reserve(points.size() * 8);
  for (std::size_t i = 0; i < points.size(); ++i) {
    const Point& point = points[i];
    if (i == 0) {
      data += fmt::format("M{} {}", point.x, point.y);
      continue;
    }
    const Point& previous = points[i - 1];
    if (point.x == previous.x && point.y == previous.y) continue;
    if (point.y == previous.y) {
      data += fmt::format("H{}", point.x);
    } else if (point.x == previous.x) {
      data += fmt::format("V{}", point.y);
    } else {
      data += fmt::format("L{} {}", point.x, point.y);
    }
  }
  return data;
}

// Per-tag in-use bytes stacked from the bottom, untagged first: each band runs along the sum of the tags up to
// it and back along the sum below it, so the top band ends at the in-use line.
std::string tag_areas(const Timeline& timeline, const Frame& frame) {
  std::string svg;
  const std::size_t tags = timeline.tags.size();
  std::vector<std::uint64_t> below(timeline.samples.size(), 0);
  for (std::size_t tag = 0; tag < tags; ++tag) {
    const bool used = std::any_of(timeline.samples.begin(), timeline.samples.end(),
                                  [tag](const TimelineSample& s) { return tag < s.tag_bytes.size() && s.tag_bytes[tag] > 0; });
    if (!used) continue;
    std::vector<std::uint64_t> up_to(below);
    for (std::size_t i = 0; i < up_to.size(); ++i) {
      const std::vector<std::uint64_t>& bytes = timeline.samples[i].tag_bytes;
      up_to[i] += tag < bytes.size() ? bytes[tag] : 0;
    }
    std::vector<Point> outline = step_line(timeline, frame, [&up_to](std::size_t i) { return up_to[i]; });
    std::vector<Point> floor = step_line(timeline, frame, [&below](std::size_t i) { return below[i]; });
    outline.insert(outline.end(), floor.rbegin(), floor.rend());
    svg += fmt::format(R"(<path class="tag-area" data-tag="{}" fill="{}" d="{}Z"><title>{}</title></path>)",
                       xml_escape(timeline.tag_label(tag)), kTagColors[tag % kTagColors.size()],
                       path_data(outline), xml_escape(timeline.tag_label(tag)));
    below = std::move(up_to);
  }
  return svg;
}

std::string y_axis(const Frame& frame) {
  std::string svg = R"(<g class="y-axis">)";
  for (const AxisTick& tick : axis_ticks(AxisKind::bytes, 0, frame.y_max)) {
    const double y = frame.py(tick.value);
    svg += fmt::format(R"(<line x1="{}" x2="{}" y1="{}" y2="{}" stroke="#e2e8f0"/>)", frame.left, frame.right, y, y);
    svg += fmt::format(R"(<text class="tick-y" x="{}" y="{}" text-anchor="end" dy="4">{}</text>)", frame.left - 8,
                       y, xml_escape(tick.label));
  }
  return svg + "</g>";
}

std::string x_axis(const Timeline& timeline, const Frame& frame) {
  std::string svg = fmt::format(R"(<g class="x-axis"><line x1="{}" x2="{}" y1="{}" y2="{}" stroke="#4a5568"/>)",
                                frame.left, frame.right, frame.bottom, frame.bottom);
  for (const AxisTick& tick : axis_ticks(x_axis_kind(timeline), 0, frame.x_end)) {
    const double x = frame.round(frame.left + tick.value / frame.x_end * (frame.right - frame.left));
    svg += fmt::format(R"(<line x1="{}" x2="{}" y1="{}" y2="{}" stroke="#4a5568"/>)", x, x, frame.bottom,
                       frame.bottom + 5);
    svg += fmt::format(R"(<text class="tick-x" x="{}" y="{}" text-anchor="middle">{}</text>)", x, frame.bottom + 18,
                       xml_escape(tick.label));
  }
  svg += "</g>";
  svg += fmt::format(R"(<text class="x-title" x="{}" y="{}" text-anchor="end" fill="#4a5568">{}</text>)",
                     frame.right, frame.bottom + 36,
                     timeline.has_times ? "time since the recording started" : "trace event");
  return svg;
}

// Shaded bands behind the data, alternating so neighbouring steps stay apart; labels go in the label layer.
std::string step_bands(const Timeline& timeline, const Frame& frame) {
  std::string svg;
  for (std::size_t i = 0; i < timeline.steps.size(); ++i) {
    const TimelineStep& step = timeline.steps[i];
    const double x = frame.px(step.begin_x);
    svg += fmt::format(R"(<rect class="step" x="{}" y="{}" width="{}" height="{}" fill="{}"><title>step {}</title></rect>)",
                       x, frame.top, std::max(0.0, frame.px(step.end_x) - x), frame.bottom - frame.top,
                       i % 2 == 0 ? "#edf2f7" : "#e2e8f0", step.number);
  }
  return svg;
}

std::string mark_lines(const Timeline& timeline, const Frame& frame) {
  std::string svg;
  for (const TimelineMark& mark : timeline.marks) {
    const bool oom = mark.kind != TimelineMark::Kind::marker;
    const double x = frame.px(mark.x);
    svg += fmt::format(R"(<line class="{}" x1="{}" x2="{}" y1="{}" y2="{}" stroke="{}" stroke-width="{}"{} vector-effect="non-scaling-stroke">)"
                       R"(<title>{}</title></line>)",
                       mark.kind == TimelineMark::Kind::oom ? "oom" : "mark", x, x, frame.top, frame.bottom,
                       oom ? kOomColor : "#718096", oom ? 2 : 1, oom ? "" : R"( stroke-dasharray="4 3")",
                       xml_escape(mark.label));
  }
  return svg;
}

// Text that must not stretch when the HTML page zooms: its script moves each label to its data-x.
std::string labels(const Timeline& timeline, const Frame& frame) {
  std::string svg = R"(<g class="labels" font-size="11">)";
  if (timeline.steps.size() <= kLabelledSteps) {
    for (const TimelineStep& step : timeline.steps) {
      svg += fmt::format(R"(<text class="step-label" data-x="{}" x="{}" y="{}" fill="#4a5568">step {}</text>)",
                         step.begin_x, frame.px(step.begin_x) + 4, frame.top + 12, step.number);
    }
  }
  std::size_t row = 0;
  const std::size_t markers = static_cast<std::size_t>(std::count_if(
      timeline.marks.begin(), timeline.marks.end(),
      [](const TimelineMark& mark) { return mark.kind == TimelineMark::Kind::marker; }));
  for (const TimelineMark& mark : timeline.marks) {
    const bool is_oom = mark.kind == TimelineMark::Kind::oom;
    if (!is_oom && markers > kLabelledMarks) continue;
    std::string text = mark.label.size() > kMarkLabelChars ? mark.label.substr(0, kMarkLabelChars - 3) + "..." : mark.label;
    // Labels near the right edge run leftwards, so they stay inside the chart.
    const bool leftwards = frame.px(mark.x) > (frame.left + frame.right) / 2;
    svg += fmt::format(R"(<text class="{}" data-x="{}" data-anchor="{}" x="{}" y="{}" text-anchor="{}" fill="{}">{}</text>)",
                       is_oom ? "oom-label" : "mark-label", mark.x, leftwards ? "end" : "start",
                       frame.px(mark.x) + (leftwards ? -4 : 4), is_oom ? frame.bottom - 8 : frame.top + 40 + 13 * static_cast<double>(row++ % 3),
                       leftwards ? "end" : "start", is_oom ? kOomColor : "#4a5568", xml_escape(text));
  }
  return svg + "</g>";
}

std::string legend(const Timeline& timeline) {
  enum class Shape { line, dashed_line, box };
  struct Entry {
    std::string_view color;
    std::string name;
    Shape shape;
  };
  std::vector<Entry> entries{{kInUseColor, "in use", Shape::line}, {kReservedColor, "reserved", Shape::line}};
  for (std::size_t tag = 0; tag < timeline.tags.size(); ++tag) {
    entries.push_back({kTagColors[tag % kTagColors.size()], timeline.tag_label(tag), Shape::box});
  }
  if (!timeline.steps.empty()) entries.push_back({"#e2e8f0", "steps", Shape::box});
  if (limit_in_view(timeline)) {
    entries.push_back({kOomColor, fmt::format("limit {}", format_size(timeline.limit_bytes)), Shape::dashed_line});
  }
  if (timeline.oom) entries.push_back({kOomColor, "OOM", Shape::line});
  std::string svg = R"(<g class="legend" font-size="12">)";
  double x = kLeft;
  for (const Entry& entry : entries) {
    if (entry.shape == Shape::box) {
      svg += fmt::format(R"(<rect x="{}" y="44" width="16" height="12" fill="{}"/>)", x, entry.color);
    } else {
      svg += fmt::format(R"(<line x1="{}" x2="{}" y1="50" y2="50" stroke="{}" stroke-width="{}"{}/>)", x, x + 16,
                         entry.color, entry.shape == Shape::line ? 3 : 2,
                         entry.shape == Shape::line ? "" : R"( stroke-dasharray="4 2")");
    }
    svg += fmt::format(R"(<text x="{}" y="54">{}</text>)", x + 20, xml_escape(entry.name));
    x += 32 + 7.0 * static_cast<double>(entry.name.size());
  }
  return svg + "</g>";
}

std::string subtitle(const Timeline& timeline) {
  const std::string limit =
      timeline.limit_bytes > 0 ? fmt::format(" (limit {})", format_size(timeline.limit_bytes)) : std::string();
  std::string text = fmt::format("{} on {}{} | peak in use {} | peak reserved {} | {} events", timeline.policy,
                                 timeline.device, limit, format_size(timeline.peak_in_use()),
                                 format_size(timeline.peak_reserved()), timeline.events);
  if (timeline.oom) text += fmt::format(" | out of memory at event {}", timeline.oom->event);
  if (timeline.marks_left_out > 0) text += fmt::format(" | {} markers and steps not drawn", timeline.marks_left_out);
  return text;
}

}  // namespace

std::string xml_escape(std::string_view text) {
  std::string escaped;
  escaped.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&': escaped += "&amp;"; break;
      case '<': escaped += "&lt;"; break;
      case '>': escaped += "&gt;"; break;
      case '"': escaped += "&quot;"; break;
      case '\'': escaped += "&#39;"; break;
      default: escaped += c;
    }
  }
  return escaped;
}

std::string timeline_chart_svg(const Timeline& timeline, std::size_t id, double top) {
  const Frame frame = frame_for(timeline);
  const std::string name = std::filesystem::path(timeline.trace).filename().string();
  std::string svg = fmt::format(
      R"(<svg xmlns="http://www.w3.org/2000/svg" class="plimsoll-timeline" y="{}" width="{}" height="{}" )"
      R"(viewBox="0 0 {} {}" font-family="sans-serif" font-size="12" data-left="{}" data-right="{}" data-top="{}" )"
      R"(data-bottom="{}" data-x-end="{}" data-x-axis="{}">)",
      top, kChartWidth, kChartHeight, kChartWidth, kChartHeight, frame.left, frame.right, frame.top, frame.bottom,
      frame.x_end, timeline.has_times ? "time_ns" : "events");
  svg += fmt::format(R"(<rect width="{}" height="{}" fill="#ffffff"/>)", kChartWidth, kChartHeight);
  svg += fmt::format(R"(<text class="title" x="{}" y="20" font-size="15" font-weight="bold">{}</text>)", kLeft,
                     xml_escape(name));
  svg += fmt::format(R"(<text class="subtitle" x="{}" y="37" fill="#4a5568">{}</text>)", kLeft,
                     xml_escape(subtitle(timeline)));
  svg += legend(timeline);
  svg += y_axis(frame);
  svg += fmt::format(R"(<clipPath id="plimsoll-clip-{}"><rect x="{}" y="{}" width="{}" height="{}"/></clipPath>)",
                     id, frame.left, frame.top - 1, frame.right - frame.left, frame.bottom - frame.top + 2);
  // Strokes keep their width when the HTML page stretches this group horizontally to zoom.
  svg += fmt::format(R"svg(<g clip-path="url(#plimsoll-clip-{})"><g class="plot-data">)svg", id);
  svg += step_bands(timeline, frame);
  if (timeline.tags.empty()) {
    std::vector<Point> area = step_line(timeline, frame, [&](std::size_t i) { return timeline.samples[i].in_use_bytes; });
    if (!area.empty()) {
      area.push_back({area.back().x, frame.bottom});
      area.push_back({area.front().x, frame.bottom});
    }
    svg += fmt::format(R"(<path class="in-use-area" fill="{}" fill-opacity="0.15" d="{}Z"/>)", kInUseColor,
                       path_data(area));
  } else {
    svg += tag_areas(timeline, frame);
  }
  const auto line = [&](std::string_view css_class, std::string_view color, auto value) {
    return fmt::format(R"(<path class="{}" fill="none" stroke="{}" stroke-width="1.5" vector-effect="non-scaling-stroke" d="{}"/>)",
                       css_class, color, path_data(step_line(timeline, frame, value)));
  };
  svg += line("reserved", kReservedColor, [&](std::size_t i) { return timeline.samples[i].reserved_bytes; });
  svg += line("in-use", kInUseColor, [&](std::size_t i) { return timeline.samples[i].in_use_bytes; });
  svg += mark_lines(timeline, frame);
  svg += "</g></g>";
  svg += x_axis(timeline, frame);
  svg += limit_line(timeline, frame);
  svg += labels(timeline, frame);
  if (timeline.samples.empty()) {
    svg += fmt::format(R"(<text x="{}" y="{}" text-anchor="middle" fill="#4a5568">no events replayed</text>)",
                       (frame.left + frame.right) / 2, (frame.top + frame.bottom) / 2);
  }
  return svg + "</svg>\n";
}

std::string timeline_svg(const std::vector<Timeline>& timelines) {
  const double height = kChartHeight * static_cast<double>(std::max<std::size_t>(1, timelines.size()));
  std::string svg = fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      R"(<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" viewBox="0 0 {} {}">)"
      "\n",
      kChartWidth, height, kChartWidth, height);
  for (std::size_t i = 0; i < timelines.size(); ++i) {
    svg += timeline_chart_svg(timelines[i], i, kChartHeight * static_cast<double>(i));
  }
  return svg + "</svg>\n";
}

}  // namespace plimsoll::telemetry
