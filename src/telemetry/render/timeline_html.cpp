#include "telemetry/render/timeline_html.hpp"

#include <cstddef>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "telemetry/render/timeline_axis.hpp"
#include "telemetry/render/timeline_svg.hpp"

namespace plimsoll::telemetry {
namespace {

using Json = nlohmann::json;

constexpr std::string_view kStyle = R"css(
body { font-family: sans-serif; margin: 16px; color: #1a202c; }
h1 { font-size: 18px; margin: 0 0 4px; }
p.help { margin: 0 0 12px; color: #4a5568; font-size: 13px; }
.chart { position: relative; max-width: 1200px; margin-bottom: 18px; border: 1px solid #e2e8f0; }
.chart svg { display: block; width: 100%; height: auto; user-select: none; }
.chart .hover-area { cursor: crosshair; }
.tooltip { position: absolute; pointer-events: none; background: rgba(255, 255, 255, 0.96); border: 1px solid #a0aec0;
  border-radius: 4px; padding: 6px 8px; font-size: 12px; line-height: 1.4; white-space: pre; display: none;
  box-shadow: 0 2px 6px rgba(0, 0, 0, 0.15); }
#plimsoll-error { color: #c53030; white-space: pre-wrap; }
)css";

// The page's behaviour: zoom on x (wheel, drag a range, or #zoom=FROM,TO in the address), a hover line with a
// tooltip, double-click to reset. The plot group is stretched horizontally rather than redrawn, so zooming costs
// one attribute; the x axis and the text labels, which must not stretch, are placed again from their data-x.
constexpr std::string_view kScript = R"js(
(function () {
  'use strict';
  var SVG_NS = 'http://www.w3.org/2000/svg';
  var data = JSON.parse(document.getElementById('plimsoll-data').textContent);

  // Axis labels as timeline_axis.cpp writes them: the largest unit not larger than the value, 4 significant digits.
  function unitFor(kind, magnitude) {
    var list = data.units[kind], chosen = list[0];
    for (var i = 1; i < list.length; i++) if (list[i][0] <= magnitude) chosen = list[i];
    return chosen;
  }
  function withUnit(kind, inUnit, unit) {
    if (inUnit === 0) return '0';
    var blank = kind === 'events' || unit[1] === '' ? '' : ' ';
    return String(Number(inUnit.toPrecision(4))) + blank + unit[1];
  }
  function label(kind, value) {
    var unit = unitFor(kind, Math.abs(value));
    return withUnit(kind, value / unit[0], unit);
  }
  function ticks(kind, from, to, target) {
    if (!(to > from)) return [{value: from, text: label(kind, from)}];
    var unit = unitFor(kind, to - from);
    var raw = (to - from) / unit[0] / target;
    var power = Math.pow(10, Math.floor(Math.log10(raw)));
    var fraction = raw / power;
    var step = (fraction <= 1 ? 1 : fraction <= 2 ? 2 : fraction <= 5 ? 5 : 10) * power;
    var out = [];
    for (var i = Math.ceil(from / unit[0] / step); i * step * unit[0] <= to * (1 + 1e-12); i++) {
      out.push({value: i * step * unit[0], text: withUnit(kind, i * step, unit)});
    }
    return out;
  }
  function element(name, attributes, parent) {
    var node = document.createElementNS(SVG_NS, name);
    for (var key in attributes) node.setAttribute(key, attributes[key]);
    if (parent) parent.appendChild(node);
    return node;
  }
  function number(svg, name) { return Number(svg.getAttribute('data-' + name)); }

  function setUp(chart, series, initial) {
    var svg = chart.querySelector('svg.plimsoll-timeline');
    var tooltip = chart.querySelector('.tooltip');
    var left = number(svg, 'left'), right = number(svg, 'right'), top = number(svg, 'top');
    var bottom = number(svg, 'bottom'), xEnd = number(svg, 'x-end'), kind = svg.getAttribute('data-x-axis');
    var width = right - left;
    var plot = svg.querySelector('.plot-data'), axis = svg.querySelector('.x-axis');
    var labels = svg.querySelectorAll('.labels [data-x]');
    // The narrowest view: one event, or a microsecond, whichever the axis counts in.
    var minSpan = Math.min(xEnd, kind === 'events' ? 1 : 1000);
    var view = {from: 0, to: xEnd};

    var hoverLine = element('line', {'class': 'hover-line', x1: left, x2: left, y1: top, y2: bottom,
      stroke: '#1a202c', 'stroke-width': 1, visibility: 'hidden', 'pointer-events': 'none'}, svg);
    var selection = element('rect', {'class': 'selection', x: left, y: top, width: 0, height: bottom - top,
      fill: '#4299e1', 'fill-opacity': 0.2, visibility: 'hidden', 'pointer-events': 'none'}, svg);
    var area = element('rect', {'class': 'hover-area', x: left, y: top, width: width, height: bottom - top,
      fill: '#ffffff', 'fill-opacity': 0}, svg);

    function px(x) { return left + (x - view.from) / (view.to - view.from) * width; }
    function dataX(p) { return view.from + (p - left) / width * (view.to - view.from); }
    function clamp(from, to) {
      var span = Math.min(Math.max(to - from, minSpan), xEnd);
      from = Math.max(0, Math.min(from, xEnd - span));
      view = {from: from, to: from + span};
    }
    function render() {
      var k = xEnd / (view.to - view.from);
      var shift = left * (1 - k) - view.from * width / (view.to - view.from);
      plot.setAttribute('transform', 'matrix(' + k + ' 0 0 1 ' + shift + ' 0)');
      while (axis.firstChild) axis.removeChild(axis.firstChild);
      element('line', {x1: left, x2: right, y1: bottom, y2: bottom, stroke: '#4a5568'}, axis);
      ticks(kind, view.from, view.to, 6).forEach(function (tick) {
        var x = px(tick.value);
        element('line', {x1: x, x2: x, y1: bottom, y2: bottom + 5, stroke: '#4a5568'}, axis);
        element('text', {'class': 'tick-x', x: x, y: bottom + 18, 'text-anchor': 'middle'}, axis).textContent = tick.text;
      });
      for (var i = 0; i < labels.length; i++) {
        var node = labels[i], x = px(Number(node.getAttribute('data-x')));
        node.setAttribute('x', x + (node.getAttribute('data-anchor') === 'end' ? -4 : 4));
        node.setAttribute('visibility', x < left || x > right ? 'hidden' : 'visible');
      }
      svg.setAttribute('data-domain', view.from + ' ' + view.to);
    }
    function pointer(event) {
      var point = svg.createSVGPoint();
      point.x = event.clientX;
      point.y = event.clientY;
      return point.matrixTransform(svg.getScreenCTM().inverse()).x;
    }
    // Memory holds its value until the next sample: the one shown is the last at or before x.
    function sampleAt(x) {
      var low = 0, high = series.x.length - 1;
      while (low < high) {
        var middle = Math.ceil((low + high) / 2);
        if (series.x[middle] <= x) low = middle; else high = middle - 1;
      }
      return low;
    }
    function describe(x) {
      var i = sampleAt(x), lines = [];
      var where = 'event ' + series.event[i];
      if (series.time) where = label('time_ns', series.time[i]) + ' (' + where + ')';
      lines.push(where);
      lines.push('in use    ' + label('bytes', series.in_use[i]));
      lines.push('reserved  ' + label('bytes', series.reserved[i]));
      lines.push(series.step[i] >= 0 ? 'step ' + series.step[i] : 'outside steps');
      if (series.tag_bytes) {
        series.tags.forEach(function (name, tag) {
          var bytes = series.tag_bytes[i][tag];
          if (bytes > 0) lines.push('  ' + name + ': ' + label('bytes', bytes));
        });
      }
      var near = (view.to - view.from) / width * 4;
      series.marks.forEach(function (mark) { if (Math.abs(mark[0] - x) <= near) lines.push(mark[1]); });
      return lines.join('\n');
    }

    var dragFrom = null;
    area.addEventListener('mousemove', function (event) {
      var p = Math.min(Math.max(pointer(event), left), right);
      hoverLine.setAttribute('x1', p);
      hoverLine.setAttribute('x2', p);
      hoverLine.setAttribute('visibility', 'visible');
      if (series.x.length > 0) {
        tooltip.textContent = describe(dataX(p));
        var box = chart.getBoundingClientRect();
        var offset = event.clientX - box.left;
        tooltip.style.display = 'block';
        tooltip.style.left = (offset > box.width * 0.6 ? offset - tooltip.offsetWidth - 14 : offset + 14) + 'px';
        tooltip.style.top = (event.clientY - box.top + 14) + 'px';
      }
      if (dragFrom !== null) {
        selection.setAttribute('x', Math.min(dragFrom, p));
        selection.setAttribute('width', Math.abs(p - dragFrom));
        selection.setAttribute('visibility', 'visible');
      }
    });
    area.addEventListener('mouseleave', function () {
      hoverLine.setAttribute('visibility', 'hidden');
      tooltip.style.display = 'none';
    });
    area.addEventListener('mousedown', function (event) {
      dragFrom = Math.min(Math.max(pointer(event), left), right);
      event.preventDefault();
    });
    window.addEventListener('mouseup', function (event) {
      if (dragFrom === null) return;
      var p = Math.min(Math.max(pointer(event), left), right);
      if (Math.abs(p - dragFrom) > 4) {
        clamp(dataX(Math.min(dragFrom, p)), dataX(Math.max(dragFrom, p)));
        render();
      }
      dragFrom = null;
      selection.setAttribute('visibility', 'hidden');
    });
    area.addEventListener('wheel', function (event) {
      event.preventDefault();
      var anchor = dataX(pointer(event)), factor = event.deltaY < 0 ? 0.8 : 1.25;
      clamp(anchor - (anchor - view.from) * factor, anchor + (view.to - anchor) * factor);
      render();
    }, {passive: false});
    area.addEventListener('dblclick', function () {
      view = {from: 0, to: xEnd};
      render();
    });

    if (initial && xEnd > 0) clamp(initial.from, initial.to);
    if (xEnd > 0) render();
  }

  // #zoom=FROM,TO (in the x axis's unit: events, or nanoseconds for timed traces) opens every chart zoomed.
  var initial = null;
  var match = /zoom=([0-9.eE+-]+),([0-9.eE+-]+)/.exec(window.location.hash);
  if (match) initial = {from: Number(match[1]), to: Number(match[2])};
  var charts = document.querySelectorAll('.chart');
  for (var i = 0; i < charts.length; i++) setUp(charts[i], data.charts[i], initial);
  var ready = document.createElement('div');
  ready.id = 'plimsoll-ready';
  ready.hidden = true;
  document.body.appendChild(ready);
})();
)js";

// Reports a script error on the page itself as well as in the console, so it is seen without developer tools.
constexpr std::string_view kErrorHandler = R"js(
window.addEventListener('error', function (event) {
  var box = document.getElementById('plimsoll-error') || document.body.appendChild(document.createElement('div'));
  box.id = 'plimsoll-error';
  box.textContent += 'script error: ' + event.message + '\n';
});
)js";

Json unit_table(AxisKind kind) {
  Json units = Json::array();
  for (const AxisUnit& unit : axis_units(kind)) units.push_back(Json::array({unit.scale, unit.suffix}));
  return units;
}

Json series_of(const Timeline& timeline) {
  Json x = Json::array(), event = Json::array(), time = Json::array(), in_use = Json::array(),
       reserved = Json::array(), step = Json::array(), tag_bytes = Json::array();
  for (const TimelineSample& sample : timeline.samples) {
    x.push_back(sample.x);
    event.push_back(sample.event);
    time.push_back(sample.time_ns);
    in_use.push_back(sample.in_use_bytes);
    reserved.push_back(sample.reserved_bytes);
    step.push_back(sample.step);
    if (!timeline.tags.empty()) tag_bytes.push_back(sample.tag_bytes);
  }
  Json marks = Json::array();
  for (const TimelineMark& mark : timeline.marks) marks.push_back(Json::array({mark.x, mark.label}));
  Json series{{"x", std::move(x)},           {"event", std::move(event)},       {"in_use", std::move(in_use)},
              {"reserved", std::move(reserved)}, {"step", std::move(step)}, {"marks", std::move(marks)}};
  if (timeline.has_times) series["time"] = std::move(time);
  if (!timeline.tags.empty()) {
    Json tags = Json::array();
    for (std::size_t tag = 0; tag < timeline.tags.size(); ++tag) tags.push_back(timeline.tag_label(tag));
    series["tags"] = std::move(tags);
    series["tag_bytes"] = std::move(tag_bytes);
  }
  return series;
}

// JSON inside <script>: a "</" in a label would end the element early, and "<\/" means the same in JSON.
std::string script_safe(std::string json) {
  for (std::size_t at = json.find("</"); at != std::string::npos; at = json.find("</", at + 3)) {
    json.replace(at, 2, "<\\/");
  }
  return json;
}

}  // namespace

std::string timeline_html(const std::vector<Timeline>& timelines) {
  std::string page = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<title>plimsoll memory timeline</title>\n<style>{}</style>\n<script>{}</script>\n</head>\n<body>\n"
      "<h1>plimsoll memory timeline</h1>\n"
      "<p class=\"help\">Scroll or drag across a chart to zoom in on x; double-click to see it all again; hover for "
      "the values. Each bucket of events keeps its lowest and highest points, so every peak is drawn.</p>\n",
      kStyle, kErrorHandler);
  Json charts = Json::array();
  for (std::size_t i = 0; i < timelines.size(); ++i) {
    page += fmt::format("<div class=\"chart\" id=\"chart-{}\">\n{}<div class=\"tooltip\"></div>\n</div>\n", i,
                        timeline_chart_svg(timelines[i], i));
    charts.push_back(series_of(timelines[i]));
  }
  if (timelines.empty()) page += "<p>No timeline: nothing was replayed.</p>\n";
  const Json data{{"units",
                   {{"bytes", unit_table(AxisKind::bytes)},
                    {"time_ns", unit_table(AxisKind::time_ns)},
                    {"events", unit_table(AxisKind::events)}}},
                  {"charts", std::move(charts)}};
  page += fmt::format("<script type=\"application/json\" id=\"plimsoll-data\">{}</script>\n<script>{}</script>\n",
                      script_safe(data.dump()), kScript);
  return page + "</body>\n</html>\n";
}

}  // namespace plimsoll::telemetry
