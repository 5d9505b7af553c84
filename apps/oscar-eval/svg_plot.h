// Minimal SVG charts for oscar-eval reports (no plotting library needed to read a report).
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace oscar_eval {

struct Series {
  std::string name;
  std::vector<double> values;
};

inline const char* series_color(std::size_t i) {
  static const char* colors[] = {"#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3",
                                 "#937860", "#da8bc3", "#8c8c8c", "#ccb974", "#64b5cd"};
  return colors[i % 10];
}

inline std::string escape_xml(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') {
      out += "&lt;";
    } else if (c == '>') {
      out += "&gt;";
    } else if (c == '&') {
      out += "&amp;";
    } else {
      out += c;
    }
  }
  return out;
}

// A line chart (log y axis) of one value per layer for each series, at (x0, y0) with size w x h.
inline std::string line_chart(const std::vector<Series>& series, const std::string& title,
                              const std::string& y_label, double x0, double y0, double w,
                              double h) {
  std::string svg;
  double lo = 1e300, hi = 0;
  std::size_t n = 0;
  for (const auto& s : series) {
    for (double v : s.values) {
      if (v > 0) lo = std::min(lo, v), hi = std::max(hi, v);
    }
    n = std::max(n, s.values.size());
  }
  if (hi <= 0 || n == 0) return svg;
  const double llo = std::floor(std::log10(lo)), lhi = std::ceil(std::log10(hi));
  const double span = std::max(lhi - llo, 1.0);
  auto px = [&](std::size_t i) { return x0 + 50 + (w - 60) * (n > 1 ? double(i) / (n - 1) : 0.5); };
  auto py = [&](double v) { return y0 + h - 30 - (h - 50) * (std::log10(v) - llo) / span; };
  svg += fmt::format("<text x='{}' y='{}' font-size='14' font-weight='bold'>{}</text>\n", x0 + 50,
                     y0 + 14, escape_xml(title));
  for (double e = llo; e <= llo + span; e += 1) {
    const double y = py(std::pow(10.0, e));
    svg += fmt::format("<line x1='{}' x2='{}' y1='{:.1f}' y2='{:.1f}' stroke='#ddd'/>\n", x0 + 50,
                       x0 + w - 10, y, y);
    svg += fmt::format("<text x='{}' y='{:.1f}' font-size='10' text-anchor='end'>1e{}</text>\n",
                       x0 + 46, y + 3, static_cast<int>(e));
  }
  for (std::size_t i = 0; i < n; ++i) {
    svg += fmt::format("<text x='{:.1f}' y='{}' font-size='10' text-anchor='middle'>{}</text>\n",
                       px(i), y0 + h - 14, i);
  }
  svg += fmt::format("<text x='{}' y='{}' font-size='11'>layer</text>\n", x0 + w / 2, y0 + h);
  svg += fmt::format("<text x='{}' y='{}' font-size='11' transform='rotate(-90 {} {})'>{}</text>\n",
                     x0 + 12, y0 + h / 2 + 40, x0 + 12, y0 + h / 2 + 40, escape_xml(y_label));
  for (std::size_t k = 0; k < series.size(); ++k) {
    std::string points;
    for (std::size_t i = 0; i < series[k].values.size(); ++i) {
      if (series[k].values[i] > 0) {
        points += fmt::format("{:.1f},{:.1f} ", px(i), py(series[k].values[i]));
      }
    }
    svg += fmt::format("<polyline fill='none' stroke='{}' stroke-width='2' points='{}'/>\n",
                       series_color(k), points);
    svg += fmt::format("<text x='{}' y='{}' font-size='11' fill='{}'>{}</text>\n", x0 + w - 150,
                       y0 + 30 + 14 * k, series_color(k), escape_xml(series[k].name));
  }
  return svg;
}

// A horizontal bar chart (linear axis), one bar per (name, value).
inline std::string bar_chart(const std::vector<std::pair<std::string, double>>& bars,
                             const std::string& title, double x0, double y0, double w, double h) {
  std::string svg;
  double hi = 0;
  for (const auto& b : bars) hi = std::max(hi, b.second);
  if (hi <= 0) hi = 1;
  svg += fmt::format("<text x='{}' y='{}' font-size='14' font-weight='bold'>{}</text>\n", x0 + 10,
                     y0 + 14, escape_xml(title));
  const double bar_h = std::min(24.0, (h - 30) / std::max<std::size_t>(bars.size(), 1));
  for (std::size_t i = 0; i < bars.size(); ++i) {
    const double y = y0 + 24 + i * bar_h;
    const double len = (w - 220) * bars[i].second / hi;
    svg += fmt::format("<text x='{}' y='{:.1f}' font-size='11' text-anchor='end'>{}</text>\n",
                       x0 + 120, y + bar_h * 0.7, escape_xml(bars[i].first));
    svg += fmt::format("<rect x='{}' y='{:.1f}' width='{:.1f}' height='{:.1f}' fill='{}'/>\n",
                       x0 + 125, y + 2, len, bar_h - 4, series_color(i));
    svg += fmt::format("<text x='{:.1f}' y='{:.1f}' font-size='11'>{:.4g}</text>\n", x0 + 130 + len,
                       y + bar_h * 0.7, bars[i].second);
  }
  return svg;
}

}  // namespace oscar_eval
